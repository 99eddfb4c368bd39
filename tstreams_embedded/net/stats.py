"""Counters of a running :class:`~tstreams_embedded.net.server.Server`.

The server's parts (the socket loop, the :class:`~tstreams_embedded.net.outbox.Outbox`,
the :class:`~tstreams_embedded.net.scheduler.GeneratorScheduler`) update one shared
:class:`ServerStats`; the ``server_stats`` method reports it to clients.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServerStats:
    received: int = 0  # requests received (a request sent in pieces counted once it ends)
    pieces: int = 0  # pieces received (wire protocol 3)
    replies: int = 0  # replies sent
    errors: int = 0  # error replies sent, and failed notifications
    malformed: int = 0  # requests that could not be decoded, or named no known method
    unroutable: int = 0  # replies to clients that had gone (their sessions were dropped)
    dropped: int = 0  # replies not sent for any other reason (e.g. the client's queue was full)
    wakeups: int = 0  # drains of the socket
    running_generators: int = 0  # generator requests in progress
    too_large: int = 0  # requests rejected RequestTooLarge
    held_back: int = 0  # requests held back while their client was over its budget
    busy: int = 0  # requests rejected ServerBusy
    write_held: int = 0  # write requests held back while the write queue was over its budget

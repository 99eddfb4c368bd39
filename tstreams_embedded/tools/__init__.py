"""Operator tooling behind the ``tstreams`` command line: inspect streams, read and follow
them, write items by hand, and inspect, move and delete named consumers.

Every command works on a data directory (``--data``, embedded) or on a server or cluster
(``--connect``), through the :class:`~tstreams_embedded.engine.protocol.backend.Backend` protocol
only. The click commands are in :mod:`.commands`; the modules under it hold the logic.
"""

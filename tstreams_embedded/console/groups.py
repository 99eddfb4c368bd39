"""The work queue groups of a stream, as the engine stores them (:mod:`tstreams_embedded.engine.protocol.queuestate`):
one ``g`` key a group, so listing them is one seek and one step a group."""

from __future__ import annotations

from ..engine.protocol import queuestate
from ..engine.protocol.validate import check_name
from ..engine.storage.catalog import lookup_stream
from ..engine.storage.core import Core
from ..engine.storage.store import entries

#: groups listed per stream (the list says when more exist)
MAX_LISTED_GROUPS = 100


def queue_groups(core: Core, stream: str, limit: int = MAX_LISTED_GROUPS) -> tuple[list[str], bool]:
    """The names of the work queue groups declared on ``stream`` (first ``limit`` by name)
    and whether more exist; :class:`~tstreams_embedded.errors.StreamNotFound` for an unknown stream."""
    store = core.store
    with store.read() as txn:
        info = lookup_stream(txn, store, check_name(stream))
        if store.queues is None:
            return [], False
        prefix = queuestate.stream_prefixes(info.id)[0]  # the groups' ``g`` keys: g · stream id · group · 0
        names: list[str] = []
        cur = txn.cursor(db=store.queues)
        if store.seek(cur, "queues", prefix):
            for key, _ in entries(cur.iternext()):
                if not key.startswith(prefix):
                    break
                if len(names) == limit:
                    return names, True
                names.append(key[len(prefix):-1].decode("utf-8"))
    return names, False

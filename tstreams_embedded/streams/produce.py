"""Writing keyed records into a stream from outside a topology (the input of an App)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import errors
from ..engine.api.engine import Engine
from ..engine.protocol import ops as O
from .records import Record, check_headers, check_timestamp, pack_envelope, partition_of
from .serdes import SerdeSpec, serde


def send_records(engine: Engine, stream: str, records: Iterable[Record | tuple[Any, Any, int]], *,
                 key_serde: SerdeSpec = "msgpack", value_serde: SerdeSpec = "msgpack",
                 records_per_transaction: int = 1000, durable: bool = True) -> int:
    """Write ``records`` (``Record`` or ``(key, value, timestamp)``) to ``stream`` as envelopes,
    each to its key's CRC-32C partition (keyless ones to partition 0). Every
    ``records_per_transaction`` records become one transaction per partition, all written in
    one atomic engine write. Returns how many records were written.

    Timestamps must be valid record timestamps (epoch ms of the years 1 to 9999, see
    :func:`~.records.check_timestamp`) and headers a dict of str names to bytes values, as
    ``TestDriver.pipe`` demands: otherwise InvalidArgument naming the record, and nothing of
    its batch is written (the batches before it are), so no app ever meets a record it cannot
    read."""
    if isinstance(records_per_transaction, bool) or not isinstance(records_per_transaction, int) \
            or records_per_transaction < 1:
        raise errors.InvalidArgument(f"records_per_transaction must be a positive integer, "
                                     f"got {records_per_transaction!r}")
    ks, vs = serde(key_serde, "key_serde"), serde(value_serde, "value_serde")
    info = engine.get_stream(stream)
    n = info.partitions
    written = 0
    batch: dict[int, list[bytes]] = {}
    pending = 0

    def flush() -> None:
        if batch:
            engine.backend.submit([O.Instant(stream, p, O.pack_items(items), stream_id=info.id)
                                   for p, items in batch.items()], durable=durable)
            batch.clear()

    for rec in records:
        if isinstance(rec, Record):
            key, value, ts, headers = rec.key, rec.value, rec.timestamp, rec.headers
        elif isinstance(rec, tuple) and len(rec) == 3:
            (key, value, ts), headers = rec, None
        else:
            raise errors.InvalidArgument(f"a record is a Record or (key, value, timestamp), got {rec!r:.60}")
        check_timestamp(ts, f"the timestamp of record {written} for {stream!r}")
        check_headers(headers)
        kb = None if key is None else ks.serialize(key)
        vb = None if value is None else vs.serialize(value)
        p = 0 if kb is None else partition_of(kb, n)
        batch.setdefault(p, []).append(pack_envelope(kb, vb, ts, headers))
        written += 1
        pending += 1
        if pending >= records_per_transaction:
            flush()
            pending = 0
    flush()
    return written

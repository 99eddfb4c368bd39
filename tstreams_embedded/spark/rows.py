"""The row schema and the conversion of transactions into Arrow record batches.

Readers yield :class:`pyarrow.RecordBatch` objects (Spark's fastest path for Python data
sources): one row per item, columns built from whole transactions at a time.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgument
from ..ids import ID_MULTIPLIER

BATCH_ROWS = 65_536

COLUMNS = ("stream", "partition", "txn_id", "txn_time", "seq", "value")


def schema_ddl(value_format: str) -> str:
    """The DDL schema string for a read with ``value_format``."""
    value_type = "binary" if value_format == "binary" else "string"
    return (
        "stream string, partition int, txn_id long, txn_time timestamp, seq int, "
        f"value {value_type}"
    )


def arrow_schema(value_format: str) -> pa.Schema:
    return pa.schema([
        ("stream", pa.string()),
        ("partition", pa.int32()),
        ("txn_id", pa.int64()),
        ("txn_time", pa.timestamp("us", tz="UTC")),
        ("seq", pa.int32()),
        ("value", pa.binary() if value_format == "binary" else pa.string()),
    ])


def _bytes_to_json(obj: Any) -> Any:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(data).decode("ascii")
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _where(stream: str, partition: int, txn_id: int, seq: int) -> str:
    return f"stream {stream!r} partition {partition} transaction {txn_id} item {seq}"


def decode_values(values: list[bytes], value_format: str, stream: str, partition: int,
                  ids: list[int], seqs: list[int]) -> pa.Array:
    """Arrow array for ``values`` in ``value_format`` (raises InvalidArgument naming the
    option and the first unreadable item)."""
    if value_format == "binary":
        return pa.array(values, pa.binary())
    if value_format == "string":
        arr = pa.array(values, pa.binary())
        try:
            return arr.cast(pa.string())
        except pa.ArrowInvalid:
            for i, v in enumerate(values):
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InvalidArgument(
                        f"option 'valueFormat'='string': {_where(stream, partition, ids[i], seqs[i])} "
                        f"is not valid UTF-8 ({exc}); use valueFormat 'binary'"
                    ) from None
            raise
    if value_format == "json":
        loads = json.loads
        out: list[str] = []
        for i, v in enumerate(values):
            try:
                text = v.decode("utf-8")
                loads(text)
            except ValueError as exc:
                raise InvalidArgument(
                    f"option 'valueFormat'='json': {_where(stream, partition, ids[i], seqs[i])} "
                    f"is not JSON ({exc}); use valueFormat 'binary' or 'string'"
                ) from None
            out.append(text)
        return pa.array(out, pa.string())
    if value_format == "msgpack":
        dumps = json.dumps
        unpackb = msgpack.unpackb
        out = []
        for i, v in enumerate(values):
            try:
                out.append(dumps(unpackb(v, raw=False, strict_map_key=False), default=_bytes_to_json,
                                 separators=(",", ":"), ensure_ascii=False))
            except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
                raise InvalidArgument(
                    f"option 'valueFormat'='msgpack': {_where(stream, partition, ids[i], seqs[i])} "
                    f"is not msgpack convertible to JSON ({exc}); use valueFormat 'binary'"
                ) from None
        return pa.array(out, pa.string())
    raise InvalidArgument(f"option 'valueFormat': unknown format {value_format!r}")


class BatchBuilder:
    """Accumulates whole transactions and emits record batches of about ``BATCH_ROWS`` rows."""

    def __init__(self, stream: str, partition: int, value_format: str) -> None:
        self.stream = stream
        self.partition = partition
        self.value_format = value_format
        self.schema = arrow_schema(value_format)
        self._reset()

    def _reset(self) -> None:
        self.ids: list[int] = []
        self.seqs: list[int] = []
        self.values: list[bytes] = []

    def add(self, txn_id: int, items: list[bytes]) -> None:
        n = len(items)
        if not n:
            return
        self.ids.extend([txn_id] * n)
        self.seqs.extend(range(n))
        self.values.extend(items)

    def __len__(self) -> int:
        return len(self.values)

    def flush(self) -> pa.RecordBatch | None:
        n = len(self.values)
        if not n:
            return None
        value = decode_values(self.values, self.value_format, self.stream, self.partition, self.ids, self.seqs)
        ids = pa.array(self.ids, pa.int64())
        # txn_time = the millisecond encoded in the ID (ids.txn_millis), in microseconds.
        micros = pc.multiply(pc.divide(ids, ID_MULTIPLIER), 1000).cast(pa.timestamp("us", tz="UTC"))
        batch = pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(self.stream, pa.string()), n),
                pa.repeat(pa.scalar(self.partition, pa.int32()), n),
                ids,
                micros,
                pa.array(self.seqs, pa.int32()),
                value,
            ],
            schema=self.schema,
        )
        self._reset()
        return batch


def record_batches(txns: Iterable[Any], stream: str, partition: int, value_format: str) -> Iterator[pa.RecordBatch]:
    """Record batches for ``txns`` (objects with ``.id`` and ``.items``), in order."""
    builder = BatchBuilder(stream, partition, value_format)
    for txn in txns:
        builder.add(txn.id, txn.items)
        if len(builder) >= BATCH_ROWS:
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch

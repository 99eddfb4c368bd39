"""The row schema and the conversion of transactions into Arrow record batches.

Readers yield :class:`pyarrow.RecordBatch` objects (Spark's fastest path for Python data
sources): one row per item, columns built from whole chunks or transactions at a time, never
from a Python object per row (see :class:`BatchBuilder`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DataCorrupted, InvalidArgument
from ..ids import ID_MULTIPLIER
from .decoding import Decoding, as_decoding
from .payloads import fixed_items, item_list

#: A record batch is emitted once it holds this many rows or this many bytes of values.
BATCH_ROWS = 65_536
BATCH_BYTES = 16 << 20
#: items converted to Arrow at once while a batch fills (see ``BatchBuilder.run``)
RUN_ITEMS = 1024
#: Arrow's binary type has 32-bit offsets.
MAX_BINARY_BYTES = 2**31 - 1

COLUMNS = ("stream", "partition", "txn_id", "txn_time", "seq", "value")


def schema_ddl(value_format: str | Decoding) -> str:
    """The DDL schema string for a read with ``value_format`` (and a ``mode``: see
    :mod:`.decoding`)."""
    decoding = as_decoding(value_format)
    value_type = "binary" if decoding.value_format == "binary" else "string"
    corrupt = f", `{decoding.corrupt}` binary" if decoding.corrupt else ""
    return (
        "stream string, partition int, txn_id long, txn_time timestamp, seq int, "
        f"value {value_type}{corrupt}"
    )


def arrow_schema(value_format: str | Decoding) -> pa.Schema:
    decoding = as_decoding(value_format)
    fields = [
        ("stream", pa.string()),
        ("partition", pa.int32()),
        ("txn_id", pa.int64()),
        ("txn_time", pa.timestamp("us", tz="UTC")),
        ("seq", pa.int32()),
        ("value", pa.binary() if decoding.value_format == "binary" else pa.string()),
    ]
    if decoding.corrupt:
        fields.append((decoding.corrupt, pa.binary()))
    return pa.schema(fields)


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
                  ids: np.ndarray, seqs: np.ndarray, strict: bool = True) -> tuple[pa.Array, np.ndarray | None]:
    """Arrow string array for ``values`` in ``value_format`` ``json`` or ``msgpack``, and
    which of them are malformed (None if none is). Strict, the first malformed item raises
    InvalidArgument naming the option and the item (``ids`` and ``seqs`` are the rows'
    ``txn_id`` and ``seq``); otherwise its value is null. The binary and string formats are
    built by :func:`binary_column` instead."""
    out: list[str | None] = []
    bad: list[int] = []
    if value_format == "json":
        loads = json.loads
        for i, v in enumerate(values):
            try:
                text = v.decode("utf-8")
                loads(text)
            except ValueError as exc:
                if strict:
                    raise InvalidArgument(
                        f"option 'valueFormat'='json': {_where(stream, partition, int(ids[i]), int(seqs[i]))} "
                        f"is not JSON ({exc}); use valueFormat 'binary' or 'string', or option 'mode' "
                        "'permissive' or 'dropMalformed'"
                    ) from None
                bad.append(i)
                out.append(None)
                continue
            out.append(text)
    elif value_format == "msgpack":
        dumps = json.dumps
        unpackb = msgpack.unpackb
        for i, v in enumerate(values):
            try:
                out.append(dumps(unpackb(v, raw=False, strict_map_key=False), default=_bytes_to_json,
                                 separators=(",", ":"), ensure_ascii=False))
            except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
                if strict:
                    raise InvalidArgument(
                        f"option 'valueFormat'='msgpack': {_where(stream, partition, int(ids[i]), int(seqs[i]))} "
                        f"is not msgpack convertible to JSON ({exc}); use valueFormat 'binary', or option "
                        "'mode' 'permissive' or 'dropMalformed'"
                    ) from None
                bad.append(i)
                out.append(None)
    else:
        raise InvalidArgument(f"option 'valueFormat': unknown format {value_format!r}")
    return pa.array(out, pa.string()), _mask(bad, len(values))


def _mask(bad: list[int], n: int) -> np.ndarray | None:
    if not bad:
        return None
    mask = np.zeros(n, np.bool_)
    mask[bad] = True
    return mask


class BatchBuilder:
    """Accumulates the items of one stream partition and emits record batches of at most
    about ``BATCH_ROWS`` rows and ``BATCH_BYTES`` bytes of values (checked after each added
    piece, so one piece, a chunk or a transaction's items, may overshoot).

    Per piece only its transaction ID, first ``seq`` and item count are kept beside the
    items; the ``txn_id``, ``txn_time`` and ``seq`` columns are computed with numpy at
    :meth:`flush`, and a binary value column is assembled into one data buffer and one
    offsets buffer (fixed-size chunks are copied without a Python object per item)."""

    def __init__(self, stream: str, partition: int, value_format: str | Decoding) -> None:
        self.stream = stream
        self.partition = partition
        self.decoding = as_decoding(value_format)
        self.value_format = self.decoding.value_format
        self.arrow_values = self.value_format in ("binary", "string")
        self.schema = arrow_schema(self.decoding)
        self._reset()

    def _reset(self) -> None:
        #: the value column so far: Arrow binary arrays and fixed-size ``n × length`` views
        #: (binary/string formats), or lists of ``bytes`` (formats decoded per item)
        self.values: list[np.ndarray | pa.Array | list[bytes]] = []
        #: items not yet converted to Arrow: converted every ``RUN_ITEMS`` items, while their
        #: ``bytes`` objects are still in the CPU cache (several times faster than at flush)
        self.run: list[bytes] = []
        self.txn_ids: list[int] = []
        self.first_seqs: list[int] = []
        self.counts: list[int] = []
        self.rows = 0
        self.nbytes = 0

    def _rows(self, txn_id: int, first_seq: int, n: int, nbytes: int) -> None:
        self.txn_ids.append(txn_id)
        self.first_seqs.append(first_seq)
        self.counts.append(n)
        self.rows += n
        self.nbytes += nbytes

    def _items(self, items: list[bytes]) -> None:
        if not self.arrow_values:
            self.values.append(items)
            return
        self.run.extend(items)
        if len(self.run) >= RUN_ITEMS:
            self._close_run()

    def _close_run(self) -> None:
        if self.run:
            values = pa.array(self.run, pa.binary())
            if isinstance(values, pa.ChunkedArray):  # pyarrow splits beyond 2 GiB
                raise InvalidArgument(f"items of more than {MAX_BINARY_BYTES} bytes in one record batch")
            self.values.append(values)
            self.run = []

    def add(self, txn_id: int, items: list[bytes], first_seq: int = 0) -> None:
        """Add decoded items of transaction ``txn_id`` (``seq`` from ``first_seq``)."""
        if items:
            self._rows(txn_id, first_seq, len(items), sum(map(len, items)))
            self._items(items)

    def add_payload(self, txn_id: int, first_seq: int, payload: Any) -> int:
        """Add the items of one stored chunk payload (:mod:`.payloads`) of ``txn_id``, the
        first with ``seq`` ``first_seq``; returns how many items it held. The payload must
        stay valid until the next :meth:`flush`."""
        if self.arrow_values:
            fixed = fixed_items(payload)
            if fixed is not None:
                n = int(fixed.shape[0])
                self._rows(txn_id, first_seq, n, int(fixed.size))
                self._close_run()
                self.values.append(fixed)
                return n
        try:
            items = item_list(payload)
        except DataCorrupted as exc:
            raise DataCorrupted(
                f"transaction {txn_id} in {self.stream!r} partition {self.partition} is damaged: {exc}. "
                "Run `tstreams check --data DIR` for a full report",
                stream=self.stream, partition=self.partition, txn_id=txn_id,
            ) from None
        if items:
            self._rows(txn_id, first_seq, len(items), len(payload))
            self._items(items)
        return len(items)

    def full(self) -> bool:
        return self.rows >= BATCH_ROWS or self.nbytes >= BATCH_BYTES

    def __len__(self) -> int:
        return self.rows

    def flush(self) -> pa.RecordBatch | None:
        n = self.rows
        if not n:
            return None
        counts = np.array(self.counts, np.int64)
        ids = np.repeat(np.array(self.txn_ids, np.int64), counts)
        starts = np.cumsum(counts) - counts  # row index of each piece's first item
        seqs = (np.arange(n, dtype=np.int64) + np.repeat(np.array(self.first_seqs, np.int64) - starts, counts))
        seqs = seqs.astype(np.int32)
        # txn_time = the millisecond encoded in the ID (ids.txn_millis), in microseconds.
        micros = ids // ID_MULTIPLIER * 1000
        strict = self.decoding.strict
        bad: np.ndarray | None = None
        raw: pa.Array | list[bytes]
        if self.arrow_values:
            self._close_run()
            value = raw = binary_column([v for v in self.values if not isinstance(v, list)], n)
            if self.value_format == "string":
                value, bad = _as_string(value, self.stream, self.partition, ids, seqs, strict)
        else:
            raw = [v for piece in self.values if isinstance(piece, list) for v in piece]
            value, bad = decode_values(raw, self.value_format, self.stream, self.partition, ids, seqs, strict)
        columns = [
            pa.repeat(pa.scalar(self.stream, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            _primitive(pa.int64(), ids),
            _primitive(pa.timestamp("us", tz="UTC"), micros),
            _primitive(pa.int32(), seqs),
            value,
        ]
        if self.decoding.corrupt:
            columns.append(_corrupt_column(raw, bad, n))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self._reset()
        if bad is not None and self.decoding.mode == "dropmalformed":
            batch = batch.filter(pa.array(~bad))
            return batch if batch.num_rows else None
        return batch


def _primitive(type_: pa.DataType, values: np.ndarray) -> pa.Array:
    """An Arrow array of ``type_`` over the memory of a contiguous numpy array (no copy)."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def binary_column(parts: list[np.ndarray | pa.Array], rows: int) -> pa.Array:
    """One Arrow binary array of ``rows`` values from ``parts`` in order: ``n × length``
    uint8 views (fixed-size items, copied straight into the data buffer) and Arrow binary
    arrays. Raises :class:`InvalidArgument` beyond Arrow's 2 GiB of values per array."""
    if len(parts) == 1 and isinstance(parts[0], pa.Array):
        return parts[0]
    data_parts: list[np.ndarray] = []
    offset_parts: list[np.ndarray] = []
    total = 0
    for part in parts:
        if isinstance(part, np.ndarray):
            count, length = part.shape
            data_parts.append(part)
            offset_parts.append(total + length * np.arange(1, count + 1, dtype=np.int64))
            total += count * length
        else:
            _, offsets_buf, data_buf = part.buffers()
            offs = np.frombuffer(offsets_buf, np.int32, count=len(part) + 1, offset=part.offset * 4)
            first, last = int(offs[0]), int(offs[-1])
            data_parts.append(np.frombuffer(data_buf, np.uint8, count=last - first, offset=first)
                              if data_buf is not None and last > first else np.empty(0, np.uint8))
            offset_parts.append(offs[1:].astype(np.int64) + (total - first))
            total += last - first
    if total > MAX_BINARY_BYTES:
        raise InvalidArgument(f"a record batch would hold {total} bytes of values, more than Arrow's "
                              f"{MAX_BINARY_BYTES} per binary array")
    data = np.empty(total, np.uint8)
    at = 0
    for chunk in data_parts:
        size = chunk.size
        if size:
            data[at:at + size].reshape(chunk.shape)[...] = chunk
        at += size
    offsets = np.empty(rows + 1, np.int32)
    offsets[0] = 0
    np.concatenate(offset_parts, out=offsets[1:], casting="unsafe")
    return pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _as_string(value: pa.Array, stream: str, partition: int, ids: np.ndarray, seqs: np.ndarray,
               strict: bool = True) -> tuple[pa.Array, np.ndarray | None]:
    """``value`` (binary) as UTF-8 strings, and which items are not UTF-8 (None if all are);
    strict, InvalidArgument names the first invalid item, otherwise its value is null."""
    try:
        return value.cast(pa.string()), None
    except pa.ArrowInvalid:
        out: list[str | None] = []
        bad: list[int] = []
        for i, v in enumerate(value.to_pylist()):
            try:
                out.append(v.decode("utf-8"))
            except UnicodeDecodeError as exc:
                if strict:
                    raise InvalidArgument(
                        f"option 'valueFormat'='string': {_where(stream, partition, int(ids[i]), int(seqs[i]))} "
                        f"is not valid UTF-8 ({exc}); use valueFormat 'binary', or option 'mode' 'permissive' "
                        "or 'dropMalformed'"
                    ) from None
                bad.append(i)
                out.append(None)
        return pa.array(out, pa.string()), _mask(bad, len(out))


def _corrupt_column(raw: pa.Array | list[bytes], bad: np.ndarray | None, n: int) -> pa.Array:
    """The corrupt-record column: the stored bytes of the malformed rows, null elsewhere."""
    if bad is None:
        return pa.nulls(n, pa.binary())
    if isinstance(raw, pa.Array):
        return pc.if_else(pa.array(bad), raw, pa.scalar(None, pa.binary()))
    return pa.array([v if b else None for v, b in zip(raw, bad, strict=True)], pa.binary())


def record_batches(txns: Iterable[Any], stream: str, partition: int, value_format: str | Decoding,
                   builder: BatchBuilder | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches for ``txns`` (objects with ``.id`` and ``.items``), in order; with
    ``builder``, rows already in it come first."""
    builder = builder or BatchBuilder(stream, partition, value_format)
    for txn in txns:
        builder.add(txn.id, txn.items)
        if builder.full():
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch

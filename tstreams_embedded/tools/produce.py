"""``tstreams produce``: items from a byte stream, written in transactions of ``txn_size``.

Input formats: ``lines`` (each line is an item, its line end removed), ``json`` (each
non-blank line is a JSON document, stored as compact UTF-8 JSON), ``msgpack`` (a stream of
msgpack documents, each stored packed). ``NaN`` and the infinities are refused in JSON (they are
not JSON, whatever Python's ``json`` accepts), and a msgpack document cut short by the end of
the input is an error naming its byte offset. Memory is bounded: a line longer than the engine's
``max_item_size`` fails with ItemTooLarge before it is read whole, and items go to the engine
in the producer's chunks. A transaction is checkpointed after every ``txn_size`` items and
at the end of the input; if an item is bad, the transaction in progress is cancelled (the
transactions checkpointed before it stay) and the error says where.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import msgpack

from .. import errors
from ..engine.api.engine import Engine
from .formats import to_json

#: bytes read from the input at a time for ``--format msgpack``
READ_SIZE = 64 * 1024


def read_items(source: BinaryIO, fmt: str, max_item_size: int) -> Iterator[bytes]:
    """The items of ``source`` in input format ``fmt``."""
    if fmt == "msgpack":
        yield from _msgpack_items(source, max_item_size)
        return
    n = 0
    while True:
        line = source.readline(max_item_size + 2)
        if not line:
            return
        n += 1
        if not line.endswith(b"\n") and len(line) > max_item_size:
            raise errors.ItemTooLarge(f"line {n} is longer than max_item_size ({max_item_size} bytes)")
        item = line[:-1] if line.endswith(b"\n") else line
        if item.endswith(b"\r"):
            item = item[:-1]
        if fmt == "json":
            if not item.strip():
                continue
            try:
                item = to_json(json.loads(item, parse_constant=_not_json)).encode("utf-8")
            except ValueError as exc:
                raise errors.InvalidArgument(f"line {n} is not JSON: {exc}") from None
        yield item


def _not_json(constant: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``, which Python's ``json`` accepts, are not JSON
    (RFC 8259), and other readers of the stream would refuse them."""
    raise ValueError(f"{constant} is not a JSON value (RFC 8259 has no NaN or infinities)")


def _msgpack_items(source: BinaryIO, max_item_size: int) -> Iterator[bytes]:
    """The msgpack documents of ``source``, each packed again; a document cut short by the
    end of the input is an error naming its byte offset, never dropped."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max_item_size + 1024 + READ_SIZE)
    n = 0
    fed = 0
    end = 0  # where the last whole document ended
    try:
        while True:
            chunk = source.read(READ_SIZE)
            if not chunk:
                break
            unpacker.feed(chunk)
            fed += len(chunk)
            for value in unpacker:
                n += 1
                end = unpacker.tell()
                yield msgpack.packb(value, use_bin_type=True)
    except msgpack.BufferFull:
        raise errors.ItemTooLarge(f"msgpack document {n + 1} is larger than max_item_size ({max_item_size} bytes)"
                                  ) from None
    except (ValueError, msgpack.UnpackException) as exc:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise errors.InvalidArgument(f"msgpack document {n + 1} is malformed at byte offset {end}: {why}") from None
    if end < fed:
        raise errors.InvalidArgument(f"msgpack document {n + 1} at byte offset {end} is truncated: the input ends "
                                     f"after {fed - end} of its bytes")


@dataclass
class Produced:
    """What :func:`produce` wrote: one ``(partition, txn_id, items)`` per transaction."""

    transactions: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def items(self) -> int:
        return sum(n for _, _, n in self.transactions)


def produce(engine: Engine, stream: str, items: Iterator[bytes], txn_size: int, partition: int | None,
            on_checkpoint: Callable[[int, int, int], None]) -> Produced:
    """Write ``items`` to ``stream`` in transactions of ``txn_size`` items."""
    done = Produced()
    with engine.producer(stream, partition=partition) as producer:
        while True:
            txn = producer.new_transaction(partition)
            n = 0
            try:
                for item in items:
                    txn.send(item)
                    n += 1
                    if n == txn_size:
                        break
            except errors.TStreamsError as exc:
                if txn.is_open:
                    txn.cancel()
                raise type(exc)(f"{exc} ({len(done.transactions)} transactions, {done.items} items "
                                "were written before it)") from None
            if n == 0:
                txn.cancel()
                return done
            txn.checkpoint()
            record = (txn.partition, txn.id, n)
            done.transactions.append(record)
            on_checkpoint(*record)
            if n < txn_size:
                return done

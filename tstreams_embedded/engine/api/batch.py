"""Batches: several administrative and data operations applied in one atomic write.

Useful for bulk work (creating many streams, seeding data, moving offsets) where one
write per call would be dominated by commit overhead::

    with engine.batch() as b:
        for name in names:
            b.create_stream(name, partitions=1)
            b.instant(name, [b"first item"])

Nothing is written until the ``with`` block ends (or :meth:`Batch.commit` is called); then
every operation is applied in one LMDB write transaction, all or nothing. If any operation
fails (for example a duplicate stream name), the whole batch raises and nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ... import errors, serde
from ..protocol import ops as O
from ..protocol.backend import StreamInfo
from ..protocol.validate import MAX_PARTITIONS, check_int, check_name, check_stream_shape, check_txn_id

if TYPE_CHECKING:
    from .context import AgentContext


class Batch:
    """Collects operations; :meth:`commit` applies them atomically and durably."""

    def __init__(self, engine: AgentContext, durable: bool = True) -> None:
        self.engine = engine
        self.durable = durable
        self._ops: list[O.Operation] = []
        self.results: list[Any] | None = None

    def __len__(self) -> int:
        return len(self._ops)

    def create_stream(self, name: str, partitions: int = 1, ttl: int = 86_400, description: str = "") -> None:
        check_name(name)
        check_stream_shape(partitions, ttl, description)
        self._ops.append(O.CreateStream(name, partitions, ttl, description))

    def delete_stream(self, name: str) -> None:
        check_name(name)
        self._ops.append(O.DeleteStream(name))

    def instant(self, stream: str, items: Iterable[Any], partition: int = 0, serializer: Any = None) -> None:
        """A checkpointed transaction of ``items`` on ``partition`` (its ID is in :attr:`results`)."""
        check_name(stream)
        dumps = serde.resolve(serializer)[0]
        if isinstance(items, (bytes, str)) or not isinstance(items, Iterable):
            raise errors.InvalidArgument(f"items must be an iterable of items, got {type(items).__name__}")
        data = [dumps(i) for i in items]
        if not data:
            raise errors.InvalidArgument("an instant transaction needs at least one item")
        self._ops.append(O.Instant(stream, partition, O.pack_items(data)))

    def set_offsets(self, stream: str, consumer: str, offsets: dict[int, int]) -> None:
        """Store a consumer's offsets (partition -> last processed transaction ID)."""
        check_name(stream)
        check_name(consumer, "consumer name")
        if not isinstance(offsets, Mapping):
            raise errors.InvalidArgument(f"offsets must be a mapping of partition to transaction id, got "
                                         f"{type(offsets).__name__}")
        for p, txn_id in offsets.items():
            check_int(p, "partition", 0, MAX_PARTITIONS - 1)
            check_txn_id(txn_id, "offset")
        self._ops.append(O.SetOffsets(stream, consumer, dict(offsets)))

    def commit(self) -> list[Any]:
        """Apply every collected operation in one atomic write; return their results
        (stream info for creations, transaction IDs for instants)."""
        self.engine.check_open()
        if self.results is not None:
            raise errors.TransactionFinished("this batch was already committed")
        results = self.engine.backend.submit(self._ops, durable=self.durable) if self._ops else []
        self.results = [StreamInfo.from_wire(r) if type(op) is O.CreateStream else r
                        for op, r in zip(self._ops, results, strict=True)]
        return self.results

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None and self.results is None:
            self.commit()

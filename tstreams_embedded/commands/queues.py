"""The ``tstreams queues`` commands: ``describe`` a work queue group, and
``requeue-dead-letters`` (put dead-lettered items back into their source stream)."""

from __future__ import annotations

import click
import msgpack

from .. import errors
from ..engine.api.group import CheckpointGroup
from ..tools.output import Output, duration
from ..tools.report import queue_summary
from .target import Target, target_options

#: the consumer name under which ``requeue-dead-letters`` reads a dead-letter stream
REQUEUE_CONSUMER = "tstreams-requeue:{stream}:{group}"


@click.group("queues")
def queues() -> None:
    """Inspect work queue groups (``engine.work_queue``) and requeue their dead letters."""


@queues.command("describe")
@target_options
@click.argument("stream")
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
def queues_describe(target: Target, stream: str, group: str, as_json: bool) -> None:
    """Work queue GROUP of STREAM: its settings, items pending (never delivered) per
    partition, in flight (locked to a consumer), waiting for a redelivery, the counters
    (delivered, redelivered, acked, nacked, dead-lettered, terminated, exhausted, gone) and
    the age of the oldest unsettled item. Counting pending items reads the index of every
    transaction not handed out yet."""
    out = Output(as_json)
    with target.open() as engine:
        status = engine.backend.queue_status(stream, group, full=True)
        now = engine.backend.now_ms()
    pending = status.pending or {}
    oldest = status.oldest_unsettled_ms
    summary = queue_summary(status, now)
    if as_json:
        out.table([summary], [(k, k) for k in summary])
        return
    out.text(f"work queue {group} on stream {stream}")
    out.table([{"partition": p, "pending": n} for p, n in sorted(pending.items())],
              [("partition", "partition"), ("pending", "pending items")])
    age = "-" if oldest is None else duration(max(0, now - oldest))
    out.table([{**{k: summary[k] for k in ("pending", "in_flight", "waiting")}, "oldest": age,
                **status.counters}],
              [("pending", "pending"), ("in_flight", "in flight"), ("waiting", "waiting redelivery"),
               ("oldest", "oldest unsettled"), ("delivered", "delivered"), ("redelivered", "redelivered"),
               ("acked", "acked"), ("nacked", "nacked"), ("dead_lettered", "dead-lettered"),
               ("terminated", "terminated"), ("exhausted", "exhausted"), ("gone", "gone (TTL)")])
    s = status.settings
    out.text(f"ack timeout {s['ack_timeout_ms'] / 1000:g} s, max deliveries {s['max_deliveries']}, "
             f"dead letters to {s['dead_letter'] or '(none)'}, backoff {s['backoff_ms']} ms, "
             f"max in flight {s['max_in_flight']}")


@queues.command("requeue-dead-letters")
@target_options
@click.argument("stream")
@click.argument("group")
@click.option("--max", "max_items", type=click.IntRange(min=1), default=None, metavar="N",
              help="Requeue at most N dead letters (default: all there are now).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON line instead of text.")
def queues_requeue(target: Target, stream: str, group: str, max_items: int | None, as_json: bool) -> None:
    """Put the dead letters of work queue GROUP back into STREAM as new items, exactly once:
    each copy and the dead-letter stream's read position are written together, so a
    re-run (or a crash half way) never requeues an item twice. Dead letters of other
    streams or groups in the same dead-letter stream are passed over."""
    out = Output(as_json)
    with target.open() as engine:
        status = engine.backend.queue_status(stream, group)
        dead_letter = status.settings["dead_letter"]
        if dead_letter is None:
            raise errors.InvalidArgument(f"work queue {group!r} of {stream!r} has no dead-letter stream")
        reader = engine.consumer(dead_letter, REQUEUE_CONSUMER.format(stream=stream, group=group), start="oldest")
        producer = engine.producer(stream)
        checkpoint = CheckpointGroup(producer, reader)
        moved = 0
        while max_items is None or moved < max_items:
            t = reader.get_transaction()
            if t is None:
                break
            items = []
            for raw in t.items:
                record = msgpack.unpackb(raw)
                if isinstance(record, dict) and record.get("stream") == stream and record.get("group") == group:
                    items.append(record["item"])
            if items:
                txn = producer.new_transaction()
                txn.send_many(items)
                moved += len(items)
            checkpoint.checkpoint()
    if as_json:
        out.table([{"requeued": moved, "from": dead_letter, "to": stream}], [("requeued", "requeued")])
    else:
        out.text(f"requeued {moved} dead letters from {dead_letter} into {stream}")

"""The operator commands of ``tstreams``: ``streams describe``, ``consume``, ``produce`` and
the ``consumers`` group (``list``, ``describe``, ``reset``, ``delete``).

Each takes ``--data DIR`` or ``--connect URL`` (:mod:`.target`), prints tables by default and
JSON lines with ``--json`` (:mod:`tstreams_embedded.tools.output`). Errors of the engine (an unknown stream or
consumer, a partition out of range, …) become one-line messages with a non-zero exit status
in :class:`tstreams_embedded.cli.Main`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar

import click

from ..engine.api.consumer import Transaction
from ..engine.protocol.validate import check_partition
from ..ids import ID_MULTIPLIER
from ..tools import report
from ..tools.formats import (
    INPUT_FORMATS,
    OUTPUT_FORMATS,
    RECORD_SERDES,
    RecordSerdes,
    decode_item,
    item_line,
    record_serdes,
    to_json,
)
from ..tools.output import Output, duration, id_time, ms_time, output_failed, silence_stdout, size
from ..tools.positions import Position, PositionType
from ..tools.produce import produce as produce_items
from ..tools.produce import read_items
from ..tools.waiting import CommitWaiter
from .target import Target, target_options

F = TypeVar("F", bound=Callable[..., Any])
#: The consumer name ``consume`` reads under without ``--group`` (it never stores offsets then).
ANONYMOUS = "tstreams-cli"
#: Transactions read ahead per partition by ``consume`` (bounds what it holds in memory).
PREFETCH = 32


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")(fn)


POSITION_METAVAR = "oldest|newest|TIME|ID"


def partition_option(help_text: str) -> Callable[[F], F]:
    return click.option("--partition", "partitions", type=click.IntRange(min=0), multiple=True, metavar="P",
                        help=help_text)


# --------------------------------------------------------------------------- streams describe
@click.command("describe")
@target_options
@click.argument("name")
@json_option
def streams_describe(target: Target, name: str, as_json: bool) -> None:
    """Describe stream NAME: per partition its head (last checkpointed transaction) and its
    time, the transactions and items it holds, the expired transactions still stored
    (checkpointed ones past the stream's TTL, and open ones past their deadline: a writer
    that died), open transactions (ID, age, time left before they expire, and the producer
    that opened each, when known), and the bytes it uses."""
    out = Output(as_json)
    with target.open() as engine:
        info = report.stream_info(engine.backend, name)
        parts = report.describe_partitions(engine.backend, info, list(range(info.partitions)))
        now = engine.backend.now_ms()
    rows = [report.partition_row(info, p, now) for p in parts]
    if as_json:
        for row in rows:
            out.json(row)
        return
    out.text(f"stream {info.name} (id {info.id}): {info.partitions} partition(s), TTL {duration(info.ttl * 1000)}, "
             f"created {ms_time(info.created)}")
    if info.description:
        out.text(f"description: {info.description}")
    out.table([dict(r, size=size(r["bytes"])) for r in rows], [
        ("partition", "partition"), ("head", "head"), ("head_time", "head time"), ("transactions", "txns"),
        ("items", "items"), ("expired", "expired"), ("open_count", "open"), ("size", "size"),
    ])
    opened = [dict(t, partition=r["partition"], age=duration(t["age_ms"]), expires_in=duration(t["deadline_ms"]),
                   producer=t["producer"] or "-")
              for r in rows for t in r["open"]]
    if opened:
        out.table(opened, [("partition", "partition"), ("id", "open transaction"), ("age", "age"),
                           ("expires_in", "expires in"), ("items", "items so far"), ("producer", "producer")])
    out.text(f"total: {sum(r['transactions'] for r in rows)} transactions, {sum(r['items'] for r in rows)} items, "
             f"{sum(r['open_count'] for r in rows)} open, {size(sum(r['bytes'] for r in rows))}")


# --------------------------------------------------------------------------- consume
@click.command("consume")
@target_options
@click.argument("stream")
@click.option("--from", "start", type=PositionType(), default=None, metavar=POSITION_METAVAR,
              help="Where to start: oldest (default), newest (only what comes next), a time (ISO 8601, "
                   "UTC unless it has a zone; or -15m, -2h, -1d) or a transaction ID. With --group, the "
                   "group's stored offsets are used unless --from is given.")
@partition_option("Read only this partition (repeatable; default: all).")
@click.option("--follow", "-f", is_flag=True,
              help="Keep reading new transactions as they are committed (like tail -f) until interrupted.")
@click.option("--max", "max_txns", type=click.IntRange(min=1), default=None, metavar="N",
              help="Stop after N transactions.")
@click.option("--format", "fmt", type=click.Choice(OUTPUT_FORMATS), default="raw", show_default=True,
              help="How to show items: raw bytes, JSON or msgpack documents (shown as JSON), hex, or the "
                   "records of a streams app's stream (record envelopes: key, value, timestamp, headers as "
                   "JSON; see --key-serde, --value-serde).")
@click.option("--key-serde", type=click.Choice(RECORD_SERDES), default=None, metavar="SERDE",
              help="With --format record: how keys were written (msgpack, the DSL's default; json, str, bytes; "
                   "windowed(msgpack|json|str|bytes) for the keys of windowed results, shown as "
                   "{key, start, end}).  [default: msgpack]")
@click.option("--value-serde", type=click.Choice(RECORD_SERDES), default=None, metavar="SERDE",
              help="With --format record: how values were written (as --key-serde).  [default: msgpack]")
@click.option("--group", default=None, metavar="NAME", help="Read as the named consumer NAME.")
@click.option("--commit", is_flag=True, help="Store the group's offsets after each transaction printed.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON line per transaction (stream, partition, id, time, items).")
def consume(target: Target, stream: str, start: Position | None, partitions: tuple[int, ...], follow: bool,
            max_txns: int | None, fmt: str, key_serde: str | None, value_serde: str | None, group: str | None,
            commit: bool, as_json: bool) -> None:
    """Print the checkpointed transactions of STREAM, in order per partition: one line per
    item, or one JSON line per transaction with --json. Without --commit no offset is stored."""
    if commit and group is None:
        raise click.UsageError("--commit needs --group NAME")
    if fmt != "record" and (key_serde or value_serde):
        raise click.UsageError("--key-serde and --value-serde go with --format record")
    serdes = record_serdes(key_serde or "msgpack", value_serde or "msgpack") if fmt == "record" else None
    out: BinaryIO = sys.stdout.buffer
    with target.open() as engine:
        consumer = engine.consumer(stream, ANONYMOUS if group is None else group,
                                   start=start.start if start else "oldest", partitions=partitions or None,
                                   use_last_offset=group is not None and start is None,
                                   prefetch=min(max_txns or PREFETCH, PREFETCH))
        waiter = CommitWaiter(engine.backend) if follow else None
        printed = 0
        try:
            while max_txns is None or printed < max_txns:
                seen = waiter.generation() if waiter is not None else 0
                t = consumer.get_transaction()
                if t is None:
                    if waiter is None:
                        break
                    waiter.wait(seen)
                    continue
                _write_transaction(out, t, fmt, as_json, serdes)
                printed += 1
                if commit:
                    consumer.checkpoint()
        except KeyboardInterrupt:
            pass
        except BrokenPipeError:  # the reader went away (| head): stop quietly
            silence_stdout()
        except OSError as exc:  # a full disk, an I/O error: one line, exit status 1
            raise output_failed(exc) from None


def _write_transaction(out: BinaryIO, t: Transaction, fmt: str, as_json: bool,
                       serdes: RecordSerdes | None) -> None:
    ms = t.id // ID_MULTIPLIER  # the timestamp of a plain item under --format record
    if as_json:
        line = {"stream": t.stream, "partition": t.partition, "id": t.id, "time": id_time(t.id),
                "items": [decode_item(i, fmt, serdes, ms) for i in t.items]}
        out.write(to_json(line).encode("utf-8") + b"\n")
    else:
        out.write(b"".join(item_line(i, fmt, serdes, ms) + b"\n" for i in t.items))
    out.flush()


# --------------------------------------------------------------------------- produce
@click.command("produce")
@target_options
@click.argument("stream")
@click.option("--format", "fmt", type=click.Choice(INPUT_FORMATS), default="lines", show_default=True,
              help="Input: one item per line, one JSON document per line, or a stream of msgpack documents.")
@click.option("--txn-size", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="Items per transaction (the last one may hold fewer).")
@click.option("--partition", type=click.IntRange(min=0), default=None, metavar="P", help="Write to this partition "
              "(default: round-robin, one partition per transaction).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON line per transaction written (stream, partition, id, items).")
def produce(target: Target, stream: str, fmt: str, txn_size: int, partition: int | None, as_json: bool) -> None:
    """Write items read from standard input to STREAM, checkpointing a transaction every
    --txn-size items and at the end of the input."""
    out = Output(as_json)
    source: BinaryIO = sys.stdin.buffer
    with target.open() as engine:
        info = engine.get_stream(stream)
        if partition is not None:
            check_partition(info, partition)
        items = read_items(source, fmt, engine.backend.max_item_size)

        def written(p: int, txn_id: int, n: int) -> None:
            if as_json:
                out.json({"stream": info.name, "partition": p, "id": txn_id, "items": n})

        done = produce_items(engine, info.name, items, txn_size, partition, written)
    out.text(f"wrote {done.items} item(s) in {len(done.transactions)} transaction(s) to {info.name}")


# --------------------------------------------------------------------------- consumers
@click.group("consumers")
def consumers() -> None:
    """List, inspect, move and delete named consumers (their stored offsets)."""


@consumers.command("list")
@target_options
@click.argument("stream", required=False)
@json_option
def consumers_list(target: Target, stream: str | None, as_json: bool) -> None:
    """List the consumers with stored offsets, of STREAM or of every stream."""
    with target.open() as engine:
        found = engine.backend.list_consumers(stream)
    rows = [{"stream": c.stream, "consumer": c.name, "partitions": len(c.offsets), "offsets": c.offsets,
             "oldest_offset_time": id_time(min(c.offsets.values()))} for c in found]
    Output(as_json).table(rows, [("stream", "stream"), ("consumer", "consumer"),
                                 ("partitions", "partitions stored"), ("oldest_offset_time", "oldest offset time")])


@consumers.command("describe")
@target_options
@click.argument("stream")
@click.argument("name")
@json_option
def consumers_describe(target: Target, stream: str, name: str, as_json: bool) -> None:
    """Per partition of STREAM: consumer NAME's offset, the head, the lag in transactions,
    items and time (how long the oldest unread transaction has waited), and the items that
    the stream's TTL deleted before NAME read them (TTL deletes by age, whoever has or has
    not read). A partition without a stored offset counts from the oldest transaction."""
    out = Output(as_json)
    with target.open() as engine:
        info = report.stream_info(engine.backend, stream)
        offsets = report.stored_offsets(engine.backend, info, name)
        rows = report.consumer_rows(engine.backend, info, name, offsets, engine.backend.now_ms())
        unread = report.expired_unread(engine.backend, info, name)
    out.text(f"consumer {name} on stream {info.name}")
    for row in rows:
        row["lag_time"] = duration(row["lag_ms"])
        row["expired_unread"] = unread.get(row["partition"], 0)
    out.table([{k: v for k, v in r.items() if k != "lag_time"} for r in rows] if as_json else rows, [
        ("partition", "partition"), ("offset", "offset"), ("offset_time", "offset time"), ("head", "head"),
        ("head_time", "head time"), ("lag_transactions", "lag txns"), ("lag_items", "lag items"),
        ("lag_time", "lag time"), ("blocked_by_open", "waits on open txn"),
        ("ahead_of_head", "offset ahead of head"), ("expired_unread", "expired unread"),
    ])
    ahead = [str(r["partition"]) for r in rows if r["ahead_of_head"]]
    if ahead:
        out.text(f"offset ahead of head on partition(s) {', '.join(ahead)}: the consumer will skip what is "
                 "written (or checkpointed) up to its offset; reset it with --to newest or a time")
    out.text(f"total lag: {sum(r['lag_transactions'] for r in rows)} transactions, "
             f"{sum(r['lag_items'] for r in rows)} items")
    lost = sum(unread.values())
    if lost:
        out.text(f"{lost} items expired unread: the stream's TTL ({info.ttl} s) deleted them before {name} read "
                 "them (TTL deletes by age, whoever has or has not read)")


@consumers.command("reset")
@target_options
@click.argument("stream")
@click.argument("name")
@click.option("--to", "to", type=PositionType(), required=True, metavar=POSITION_METAVAR,
              help="oldest; newest (after the last checkpointed transaction, before any still open); a "
                   "time (ISO 8601, UTC unless it has a zone; or -15m, -2h, -1d): the consumer reads again "
                   "every transaction checkpointed since then, including those opened before it; or a "
                   "transaction ID: the consumer next reads that transaction. A position past the head is "
                   "clamped to the head.")
@partition_option("Reset only this partition (repeatable; default: all).")
@click.option("--dry-run", is_flag=True, help="Show the new offsets without writing them.")
@json_option
def consumers_reset(target: Target, stream: str, name: str, to: Position, partitions: tuple[int, ...],
                    dry_run: bool, as_json: bool) -> None:
    """Move consumer NAME's offsets on STREAM, all partitions in one atomic write. Stop the
    consumer first: if its offsets change between the read and the write, nothing is
    written (OffsetsConflict)."""
    out = Output(as_json)
    with target.open() as engine:
        info = report.stream_info(engine.backend, stream)
        chosen = report.checked_partitions(info, partitions)
        stored, plan = report.reset_plan(engine.backend, info, name, to, chosen)
        if not dry_run:
            report.apply_reset(engine.backend, info, name, stored, {p: plan[p].offset for p in chosen})
    rows = [{"stream": info.name, "consumer": name, "partition": p, "offset": stored.get(p),
             "offset_time": id_time(stored.get(p, 0)), "new_offset": plan[p].offset,
             "next_read_id": plan[p].next_id or None, "next_read_from": id_time(plan[p].next_id),
             "clamped": plan[p].clamped, "applied": not dry_run} for p in chosen]
    out.table(rows, [("partition", "partition"), ("offset", "offset"), ("offset_time", "offset time"),
                     ("new_offset", "new offset"), ("next_read_id", "next read"),
                     ("next_read_from", "next read (opened at)"), ("clamped", "clamped to head")])
    clamped = [p for p in chosen if plan[p].clamped]
    if clamped:
        out.text(f"--to {to.text} is past the head of partition(s) {', '.join(map(str, clamped))}: their offsets "
                 "were clamped to the head (after the last checkpointed transaction, before any still open)")
    out.text(f"dry run: nothing written (--to {to.text})" if dry_run
             else f"reset {len(chosen)} partition(s) of consumer {name} on {info.name} to {to.text}")


@consumers.command("delete")
@target_options
@click.argument("stream")
@click.argument("name")
@json_option
def consumers_delete(target: Target, stream: str, name: str, as_json: bool) -> None:
    """Delete consumer NAME of STREAM: all its stored offsets, in one write."""
    out = Output(as_json)
    with target.open() as engine:
        info = report.stream_info(engine.backend, stream)
        removed = report.delete_consumer(engine.backend, info, name)
    if as_json:
        out.json({"stream": info.name, "consumer": name, "partitions_deleted": removed})
    out.text(f"deleted consumer {name} of {info.name} ({removed} partition offset(s))")

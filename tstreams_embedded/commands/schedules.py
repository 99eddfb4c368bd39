"""``tstreams schedules list|cancel``: the pending schedules of scheduled delivery
(``engine.schedule``, :mod:`tstreams_embedded.engine.protocol.schedules`)."""

from __future__ import annotations

import click

from ..tools.output import Output
from ..tools.report import schedule_row
from .target import Target, target_options


@click.group()
def schedules() -> None:
    """List and cancel scheduled deliveries (engine.schedule)."""


@schedules.command("list")
@target_options
@click.argument("stream", required=False)
@click.option("--limit", default=None, type=click.IntRange(min=0), help="At most this many (earliest due first).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
def schedules_list(target: Target, stream: str | None, limit: int | None, as_json: bool) -> None:
    """List the pending schedules, of STREAM or of every stream, earliest due first: ID,
    stream, partition, items, due time and how long until then (negative: overdue)."""
    with target.open() as engine:
        found = engine.schedules(stream, limit)
        now = engine.backend.now_ms()
    rows = [schedule_row(s, now) for s in found]
    Output(as_json).table(rows, [("id", "id"), ("stream", "stream"), ("partition", "partition"), ("items", "items"),
                                 ("due", "due"), ("in", "in")])


@schedules.command("cancel")
@target_options
@click.argument("schedule_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as a JSON line.")
def schedules_cancel(target: Target, schedule_id: int, as_json: bool) -> None:
    """Cancel schedule ID before it fires. Exit status 1 if there is no such pending
    schedule (it fired, was cancelled, or never existed)."""
    with target.open() as engine:
        cancelled = engine.cancel_schedule(schedule_id)
    out = Output(as_json)
    if as_json:
        out.json({"id": schedule_id, "cancelled": cancelled})
    out.text(f"cancelled schedule {schedule_id}" if cancelled else
             f"no pending schedule {schedule_id} (it fired, was cancelled, or never existed)")
    if not cancelled:
        raise SystemExit(1)

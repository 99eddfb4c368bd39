"""An end-to-end embedded example of exactly-once read-process-write.

A worker process reads ``orders`` and writes one ``invoices`` item per order, checkpointing
its output transaction and its input offsets together with a :class:`CheckpointGroup`. The
example SIGKILLs the worker several times at random moments and restarts it; at the end it
proves that every order produced exactly one invoice.

Run: ``python -m tstreams_embedded.quickstart [--orders N] [--data DIR]``.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import click

import tstreams_embedded as ts


def worker(data: str) -> None:
    """Process orders until none are left; safe to SIGKILL at any moment."""
    # A short transaction TTL: if this worker is killed with a transaction open, readers of
    # "invoices" wait at most ~3 s for it to expire (T-streams semantics: order is never broken).
    with ts.open(data, txn_ttl=3.0) as engine:
        consumer = engine.consumer("orders", name="invoicer", start="oldest", serializer="json")
        producer = engine.producer("invoices", serializer="json")
        group = ts.CheckpointGroup(producer, consumer)
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 1.0:
            txn = consumer.get_transaction()
            if txn is None:
                time.sleep(0.01)
                continue
            idle_since = time.monotonic()
            out = producer.new_transaction(partition=txn.partition)
            out.send_many({"order": o["id"], "amount": round(o["qty"] * o["price"], 2)} for o in txn.items)
            group.checkpoint()  # output transaction + input offsets: one atomic write


@click.command("quickstart")
@click.option("--orders", default=100_000, show_default=True, type=click.IntRange(1))
@click.option("--data", default=None, type=click.Path(file_okay=False),
              help="Data directory (default: a new temporary one).")
@click.option("--kills", default=5, show_default=True, type=click.IntRange(0))
@click.option("--worker", "worker_mode", is_flag=True, hidden=True)
def quickstart(orders: int, data: str | None, kills: int, worker_mode: bool) -> None:
    """Run the embedded exactly-once example (SIGKILLs a worker, proves no loss/duplicates)."""
    if worker_mode:
        if data is None:
            raise click.UsageError("--worker needs --data")
        worker(data)
        return
    sys.exit(run_example(orders, data, kills))


def run_example(orders: int, data: str | None, kills: int) -> int:
    """Write ``orders``, run the worker with ``kills`` SIGKILLs, audit the invoices; 0 if exactly-once."""
    data = data or tempfile.mkdtemp(prefix="tstreams-quickstart-")
    rng = random.Random(7)
    with ts.open(data) as engine:
        for name in ("orders", "invoices"):
            if not engine.has_stream(name):
                engine.create_stream(name, partitions=4)
        producer = engine.producer("orders", serializer="json")
        for start in range(0, orders, 100):
            producer.instant([{"id": i, "qty": rng.randint(1, 5), "price": rng.randint(100, 9999) / 100}
                              for i in range(start, min(start + 100, orders))])
    print(f"wrote {orders} orders to {data}")
    cmd = [sys.executable, "-m", "tstreams_embedded.quickstart", "--worker", "--data", data]
    for k in range(kills):
        proc = subprocess.Popen(cmd)
        time.sleep(rng.uniform(0.4, 1.5))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            print(f"  worker SIGKILLed mid-run ({k + 1}/{kills}); restarting from stored offsets")
    subprocess.run(cmd, check=True)
    with ts.open(data) as engine:
        seen: collections.Counter[int] = collections.Counter()
        reader = engine.consumer("invoices", name="audit", use_last_offset=False, serializer="json")
        deadline = time.monotonic() + 30  # a killed worker's open transaction blocks until it expires
        while len(seen) < orders and time.monotonic() < deadline:
            txn = reader.get_transaction()
            if txn is None:
                time.sleep(0.05)
                continue
            seen.update(inv["order"] for inv in txn.items)
    missing = orders - len(seen)
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    print(f"invoices for {len(seen)} of {orders} orders: missing={missing} duplicated={duplicated}")
    print("exactly-once: OK" if missing == 0 and duplicated == 0 else "exactly-once: FAILED")
    return 0 if missing == 0 and duplicated == 0 else 1


if __name__ == "__main__":
    quickstart(prog_name="python -m tstreams_embedded.quickstart")

"""Stage costs of the Spark reader's Python worker side, outside Spark (issue 11).

``python -m benchmarks.spark_profile [--rows N] [--workdir DIR]`` writes N rows the way the
Spark suite does (100-byte values, 1,000-item transactions, 4 partitions) and a second
stream of the same shape with values of varying length (50–150 bytes), then times, per
1M rows, what ``read()`` does for one partition after the other:

* **LMDB scan**: the index walk, the chunk reads and their CRC32C checks
  (:func:`~tstreams_embedded.engine.storage.reads.transaction_payloads`), no decoding (the payloads
  are copied out of the snapshot here; the reader copies them into Arrow buffers instead);
* **msgpack decode**: ``msgpack.unpackb`` of every chunk into ``bytes`` objects (what
  ``Backend.fetch`` does), and the fixed-size layout check + view that replaces it when
  every item of a chunk has one length (:func:`~tstreams_embedded.spark.payloads.fixed_items`);
* **Arrow building**: record batches from decoded items lists (the generic path, also the
  path of the previous reader with per-row lists), and from payloads (the embedded path);
* **end to end**: the previous reader (``Backend.fetch`` + per-row lists, kept here as
  ``_previous_batches`` for the comparison) and the current ``read()``.

Each figure is the minimum over ``--reps`` runs (CPU time of one process; the machine is
shared, so the minimum is the least disturbed run). Results are printed as Markdown.
"""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import msgpack
import pyarrow as pa
import pyarrow.compute as pc

import tstreams_embedded as ts
from tstreams_embedded.engine.protocol.iteration import iter_transactions
from tstreams_embedded.engine.storage import reads
from tstreams_embedded.engine.storage.catalog import lookup_stream
from tstreams_embedded.ids import ID_MULTIPLIER
from tstreams_embedded.spark.local_read import local_batches
from tstreams_embedded.spark.payloads import fixed_items
from tstreams_embedded.spark.rows import BatchBuilder, arrow_schema

TXN_ITEMS = 1_000
PARTITIONS = 4


def _load(path: Path, rows: int) -> None:
    rnd = random.Random(11)
    with ts.open(str(path), durability="async") as engine:
        for stream, varying in (("fixed", False), ("varying", True)):
            engine.create_stream(stream, partitions=PARTITIONS)
            producer = engine.producer(stream)
            for t in range(rows // TXN_ITEMS):
                items = [(b"%012d" % (t * TXN_ITEMS + i)) + b"x" * (rnd.randint(38, 138) if varying else 88)
                         for i in range(TXN_ITEMS)]
                producer.instant(items, partition=t % PARTITIONS)


def _previous_batches(txns: Iterator[Any], stream: str, partition: int) -> Iterator[pa.RecordBatch]:
    """The reader before issue 11: per-row Python lists of ids, seqs and values, 65,536 rows."""
    schema = arrow_schema("binary")
    ids: list[int] = []
    seqs: list[int] = []
    values: list[bytes] = []

    def flush() -> pa.RecordBatch:
        n = len(values)
        arr = pa.array(ids, pa.int64())
        micros = pc.multiply(pc.divide(arr, ID_MULTIPLIER), 1000).cast(pa.timestamp("us", tz="UTC"))
        return pa.RecordBatch.from_arrays(
            [pa.repeat(pa.scalar(stream, pa.string()), n), pa.repeat(pa.scalar(partition, pa.int32()), n), arr,
             micros, pa.array(seqs, pa.int32()), pa.array(values, pa.binary())], schema=schema)

    for txn in txns:
        n = len(txn.items)
        ids.extend([txn.id] * n)
        seqs.extend(range(n))
        values.extend(txn.items)
        if len(values) >= 65_536:
            yield flush()
            ids, seqs, values = [], [], []
    if values:
        yield flush()


def _stages(engine: ts.Engine, stream: str, upto: int) -> dict[str, Callable[[], int]]:
    core = engine.backend
    payloads: dict[int, list[tuple[int, list[Any]]]] = {}

    def scan() -> int:
        """The snapshot walk of the embedded path without decoding (payloads copied out)."""
        n = 0
        store = core.store
        for p in range(PARTITIONS):
            payloads[p] = []
            with store.read(buffers=True) as txn:
                info = lookup_stream(txn, store, stream)
                scan = reads.scan(txn, store, stream, p, 0, upto, 1 << 20, core.clock(), load=False)
                for txn_id, _ in scan.index:
                    chunks = reads.transaction_payloads(txn, store, info, p, txn_id)
                    payloads[p].append((txn_id, [bytes(c) for c in chunks]))
            n += len(payloads[p]) * TXN_ITEMS  # not decoded: every transaction holds TXN_ITEMS
        return n

    scan()
    decoded = {p: {t: [i for c in cs for i in msgpack.unpackb(c)] for t, cs in payloads[p]} for p in payloads}

    def unpack() -> int:
        return sum(len(msgpack.unpackb(c)) for p in payloads for _, cs in payloads[p] for c in cs)

    def fixed() -> int:
        n = 0
        for p in payloads:
            for _, cs in payloads[p]:
                for c in cs:
                    view = fixed_items(c)
                    n += len(msgpack.unpackb(c)) if view is None else view.shape[0]
        return n

    def build(from_payloads: bool) -> Callable[[], int]:
        def run() -> int:
            n = 0
            for p in payloads:
                builder = BatchBuilder(stream, p, "binary")
                for txn_id, cs in payloads[p]:
                    if from_payloads:
                        seq = 0
                        for c in cs:
                            seq += builder.add_payload(txn_id, seq, c)
                    else:
                        builder.add(txn_id, decoded[p][txn_id])
                    if builder.full():
                        n += builder.flush().num_rows
                last = builder.flush()
                n += last.num_rows if last is not None else 0
            return n
        return run

    def previous() -> int:
        return sum(b.num_rows for p in range(PARTITIONS)
                   for b in _previous_batches(iter(iter_transactions(core, stream, p, 0, upto, 256)), stream, p))

    def current() -> int:
        return sum(b.num_rows for p in range(PARTITIONS)
                   for b in local_batches(core, stream, p, 0, upto, "binary"))

    return {
        "LMDB scan (index, chunk reads, CRC32C, payloads copied out)": scan,
        "msgpack decode into bytes objects (`unpackb`)": unpack,
        "fixed-size layout check + view (`fixed_items`, else `unpackb`)": fixed,
        "Arrow building from decoded items lists (generic path)": build(False),
        "Arrow building from payloads (embedded path)": build(True),
        "end to end, previous reader (`fetch` + per-row lists)": previous,
        "end to end, current `read()` (embedded path)": current,
    }


@click.command()
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--reps", default=5, show_default=True)
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None)
def main(rows: int, reps: int, workdir: Path | None) -> None:
    base = Path(tempfile.mkdtemp(prefix="tstreams-spark-profile-", dir=workdir))
    try:
        _load(base / "data", rows)
        with ts.open(str(base / "data")) as engine:
            print(f"| stage | fixed 100 B values: s per 1M rows (min / median of {reps}) "
                  f"| 50–150 B values: s per 1M rows |")
            print("|---|---|---|")
            table: dict[str, list[str]] = {}
            for stream in ("fixed", "varying"):
                upto = 2**63 - 1
                for name, fn in _stages(engine, stream, upto).items():
                    times = []
                    for _ in range(reps):
                        t0 = time.perf_counter()
                        n = fn()
                        times.append(time.perf_counter() - t0)
                    assert n == rows, (name, n)
                    scale = 1_000_000 / rows
                    cell = f"{min(times) * scale:.3f} / {statistics.median(times) * scale:.3f}"
                    table.setdefault(name, []).append(cell)
            for name, cells in table.items():
                print(f"| {name} | " + " | ".join(cells) + " |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

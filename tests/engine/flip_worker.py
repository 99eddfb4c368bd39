"""Single-bit flips of ``data.mdb`` (issue 19, item 1), run in a subprocess by
``test_damage.py``: a damaged page may still crash LMDB itself, and the test must see that.

``python flip_worker.py fill DIR`` writes the directory the flips damage: stream data,
consumer offsets, a marker, a state store of several pages, leases and the commit log.

``python flip_worker.py flip DIR WORK SEED COUNT [FIRST]`` flips ``COUNT`` bits (chosen from
``SEED``) one at a time, each in a fresh copy of ``DIR`` under ``WORK``, reads everything
the engine returns and runs ``tstreams check``, and prints one JSON line per flip:
``{"flip": i, "offset": o, "bit": b, "outcome": "same" | "corrupted" | "different" | <error type>,
"check_ok": bool, "detail": str}``. The first line is the answer of the undamaged copy.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from typing import Any

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.operator.check import check_directory
from tstreams_embedded.engine.protocol import ops as O

STATE_ENTRIES = 300
OPTIONS: dict[str, Any] = {"compaction_interval": None, "keepalive_interval": None}


def fill(path: str) -> None:
    with ts.open(path, durability="sync", **OPTIONS) as e:
        e.create_stream("s", partitions=2)
        e.create_stream("t", partitions=1)
        p, q = e.producer("s"), e.producer("t")
        for i in range(40):
            p.instant([b"item-%d-%d" % (i, j) for j in range(3)], partition=i % 2)
            q.instant([b"t-%d" % i])
        c = e.consumer("s", "c", start="oldest")
        for _ in range(7):
            c.get_transaction(0)
        c.checkpoint()
        e.backend.submit([O.SetMarker("m", 42)])
        for lo in range(0, STATE_ENTRIES, 100):
            e.backend.submit([O.StoreWrite("app/counts", [[b"key-%05d" % k, b"%d" % (k * 7)]
                                                          for k in range(lo, lo + 100)])])
        e.backend.submit([O.Lease("app/group", b"task-%d" % k, "member-a", 1, 10**9) for k in range(4)])


def answer(path: str) -> dict[str, Any]:
    """Everything the engine returns about the directory, as JSON-able values."""
    with ts.open(path, **OPTIONS) as e:
        b = e.backend
        out: dict[str, Any] = {"streams": [[s.name, s.id, s.partitions, s.ttl] for s in b.list_streams()]}
        for s in b.list_streams():
            for part in range(s.partitions):
                txns = b.transactions_range(s.name, part, 0, 2**63 - 1)
                out[f"{s.name}/{part}"] = [[t.id, [i.hex() for i in t.items]] for t in txns]
                out[f"{s.name}/{part}/last"] = b.last_txn_id(s.name, part)
            out[f"{s.name}/offsets"] = sorted(b.get_offsets(s.name, "c").items())
        out["consumers"] = [[c.stream, c.name, sorted(c.offsets.items())] for c in b.list_consumers()]
        out["marker"] = b.get_marker("m")
        out["state"] = [[k.hex(), v.hex()] for k, v in b.store_range("app/counts")]
        out["leases"] = [[k.hex(), v.hex()] for k, v in b.store_range("app/group")]
        out["log"] = [[seq, now, repr(ops)] for seq, now, ops in b.read_log(0)]  # type: ignore[attr-defined]
        c = e.consumer("s", "c")  # resumes at its stored offset
        out["resumed"] = [t.id for t in iter(lambda: c.get_transaction(0), None)]
    return out


def flip(src: str, work: str, seed: int, count: int, first: int) -> None:
    expected = answer_of_copy(src, os.path.join(work, "pristine"))
    print(json.dumps({"flip": -1, "outcome": "pristine"}), flush=True)
    data = open(os.path.join(src, "data.mdb"), "rb").read()
    rnd = random.Random(seed)
    flips = [(rnd.randrange(len(data)), rnd.randrange(8)) for _ in range(first + count)]
    for i in range(first, first + count):
        offset, bit = flips[i]
        print(json.dumps({"flip": i, "offset": offset, "bit": bit, "outcome": "started"}), flush=True)
        copy = os.path.join(work, f"flip{i}")
        shutil.rmtree(copy, ignore_errors=True)  # left by a run that crashed on it
        shutil.copytree(src, copy)
        damaged = bytearray(data)
        damaged[offset] ^= 1 << bit
        with open(os.path.join(copy, "data.mdb"), "wb") as f:
            f.write(damaged)
        detail = ""
        try:
            got = answer(copy)
            outcome = "same" if got == expected else "different"
            if outcome == "different":
                detail = json.dumps({k: [expected.get(k), got.get(k)] for k in set(expected) | set(got)
                                     if expected.get(k) != got.get(k)})[:2000]
        except errors.DataCorrupted as exc:
            outcome, detail = "corrupted", str(exc)
        except Exception as exc:  # noqa: BLE001 - reported: any other error is a finding
            outcome, detail = type(exc).__name__, str(exc)
        report = check_directory(copy)
        print(json.dumps({"flip": i, "offset": offset, "bit": bit, "outcome": outcome, "check_ok": report.ok,
                          "detail": detail, "problems": report.problems[:3]}), flush=True)
        shutil.rmtree(copy)


def answer_of_copy(src: str, copy: str) -> dict[str, Any]:
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(src, copy)
    try:
        return answer(copy)
    finally:
        shutil.rmtree(copy)


if __name__ == "__main__":
    if sys.argv[1] == "fill":
        fill(sys.argv[2])
    else:
        flip(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
             int(sys.argv[6]) if len(sys.argv) > 6 else 0)

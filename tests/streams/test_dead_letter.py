"""``App(on_record_error="dead_letter")``: each bad record (damaged envelope, undecodable
value, invalid timestamp, key too long to store) goes with its source and error to the
dead-letter stream in the same commit as the rest of the task's work (issue 21 §4, "Poison
records"): through TestDriver, and through a real app SIGKILLed at random points (each bad
record there exactly once)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import msgpack
import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.protocol import ops as O
from tstreams_embedded.streams import App, StreamsBuilder, TestDriver
from tstreams_embedded.streams.records import pack_envelope

from .harness import (
    chunks,
    committed_transactions,
    kill_at_random_points,
    read_envelopes,
    run_to_completion,
    worker_command,
)

WORKER = Path(__file__).resolve().parent / "dead_letter_worker.py"
KILLS = 6
#: bad items of each kind: not an envelope (plain non-JSON bytes), a value that is not JSON,
#: a timestamp out of range, a key too long for a store
BAD = [b"\xc1not json", pack_envelope(b"k", b"{oops", 5, None), pack_envelope(b"k", b"1", 2**62, None),
       pack_envelope(b"x" * 300, b"1", 5, None)]


def counts() -> StreamsBuilder:
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="json").group_by_key(key_serde="str").count(store="n")
    return b


def letters(engine: ts.Engine, stream: str) -> list[dict[str, object]]:
    out = []
    for kb, vb, _, _ in read_envelopes(engine, stream):
        assert kb is None and vb is not None
        out.append(msgpack.unpackb(vb))
    return out


def test_each_kind_of_bad_record_goes_to_the_dead_letter_stream_with_its_source() -> None:
    with TestDriver(counts().build(), on_record_error="dead_letter") as driver:
        for item in BAD:
            driver.pipe_raw("in", item)
        driver.pipe("in", "k", 1, 7)
        assert driver.metrics["records_dead_lettered"] == len(BAD)
        assert driver.store("n").all() == {"k": 1}
        got = letters(driver.engine, "test-app-dead-letters")
        assert [g["item"] for g in got] == BAD
        assert {(g["stream"], g["partition"], g["index"]) for g in got} == {("in", 0, 0)}
        assert len({g["txn_id"] for g in got}) == len(BAD)
        assert [str(g["error"]).split(":")[0] for g in got] == [
            "SerdeError", "SerdeError", "InvalidArgument", "StoreKeyTooLong"]


def test_the_dead_letter_stream_can_be_named(tmp_path: Path) -> None:
    with ts.open(str(tmp_path / "db")) as engine:
        engine.create_stream("in")
        engine.producer("in").instant([b"\xc1"])
        App(engine, application_id="a", topology=counts().build(), on_record_error="dead_letter",
            dead_letter_stream="poison").run()
        assert [g["item"] for g in letters(engine, "poison")] == [b"\xc1"]
        with pytest.raises(errors.InvalidArgument, match="dead_letter_stream"):
            App(engine, application_id="a", topology=counts().build(), dead_letter_stream="")


@pytest.mark.timeout(240)
def test_each_bad_record_is_dead_lettered_exactly_once_across_sigkills(tmp_path: Path) -> None:
    rng = random.Random(21)
    data = str(tmp_path / "data")
    good: Counter[str] = Counter()
    bad: list[bytes] = []
    ops: list[O.Operation] = []
    for n in range(240):  # transactions of 1 to 4 items, about one bad item in six
        items = []
        for i in range(rng.randint(1, 4)):
            if rng.random() < 1 / 6:
                item = rng.choice(BAD) if rng.random() < 0.5 else f"\xc1bad {n}.{i}".encode()
                bad.append(item)
            else:
                key = f"k{rng.randint(0, 9)}"
                good[key] += 1
                item = pack_envelope(key.encode(), b"1", n, None)
            items.append(item)
        ops.append(O.Instant("in", 0, O.pack_items(items)))
    parts = chunks(ops, KILLS + 1)
    with ts.open(data, compaction_interval=None) as engine:
        engine.create_stream("in")

        def processed() -> int:
            return committed_transactions(engine, "in", "dlq")

        kill_at_random_points(engine, worker_command(WORKER, data, "run"), parts[:KILLS], processed, rng, reach=0.5)
        engine.backend.submit(parts[KILLS])
        run_to_completion(worker_command(WORKER, data, "finish"))
        assert processed() == len(ops)
        got = letters(engine, "dlq-dead-letters")
        places = [(g["txn_id"], g["index"]) for g in got]
        assert len(places) == len(set(places)) == len(bad)  # each bad record exactly once
        assert sorted(g["item"] for g in got) == sorted(bad)  # type: ignore[type-var]
        store = App(engine, application_id="dlq", topology=counts().build()).store("n")
        assert store.all() == dict(good)

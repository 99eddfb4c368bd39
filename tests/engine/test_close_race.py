"""Writes that race ``engine.close()`` (issue 19, item 3): every call either commits and
returns, or does not commit and raises. A call that raised ``EngineClosed`` although its
write was committed makes a caller that retries duplicate data."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.api.engine import Engine

WRITERS = 4


def race_writers_against_close(engine: Engine, writes_before_close: int,
                               caught: type[errors.TStreamsError]) -> tuple[dict[bytes, int], dict[bytes, Exception]]:
    """``WRITERS`` threads write one-item instants (partition = writer) to stream ``s`` of
    ``engine`` until a call raises ``caught``; ``engine`` is closed once
    ``writes_before_close`` calls have returned. Returns ``(item -> ID a call returned,
    item -> what the call that wrote it raised)``."""
    returned: dict[bytes, int] = {}
    raised: dict[bytes, Exception] = {}
    lock = threading.Lock()
    started = threading.Barrier(WRITERS + 1)
    written = threading.Semaphore(0)

    def writer(w: int) -> None:
        producer = engine.producer("s")
        started.wait()
        for i in range(100_000):
            item = b"w%d-%d" % (w, i)
            try:
                tid = producer.instant([item], partition=w)
            except caught as exc:
                with lock:
                    raised[item] = exc
                return
            with lock:
                returned[item] = tid
            written.release()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    started.wait()
    for _ in range(writes_before_close):  # close while the writers are in full flight
        written.acquire()
    engine.close()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    assert len(raised) == WRITERS  # every writer saw the close on its next call
    return returned, raised


def stored_items(engine: Engine) -> dict[bytes, int]:
    """item -> ID of every item stored in stream ``s``."""
    stored: dict[bytes, int] = {}
    c = engine.consumer("s", "check", start="oldest", use_last_offset=False)
    for p in range(WRITERS):
        while (t := c.get_transaction(p)) is not None:
            for item in t.items:
                stored[item] = t.id
    return stored


@pytest.mark.parametrize("durability", ["sync", "strict", "async"])
@pytest.mark.parametrize("run", range(3))
def test_every_write_racing_close_either_commits_and_returns_or_raises_without_commit(
        tmp_path: Path, durability: str, run: int) -> None:
    path = tmp_path / "d"
    with ts.open(path, durability=durability, compaction_interval=None) as e:
        e.create_stream("s", partitions=WRITERS)
    engine = ts.open(path, durability=durability, compaction_interval=None, keepalive_interval=None)
    returned, raised = race_writers_against_close(engine, 20 * (run + 1), errors.EngineClosed)
    with ts.open(path, compaction_interval=None) as e:
        stored = stored_items(e)
    committed_but_raised = sorted(set(raised) & set(stored))
    assert not committed_but_raised, f"{len(committed_but_raised)} calls raised EngineClosed but were committed"
    assert stored == returned  # every call that returned is stored, under the ID it returned


@pytest.mark.parametrize("run", range(2))
def test_every_remote_write_racing_close_either_commits_and_returns_or_raises_without_commit(
        tmp_path: Path, run: int) -> None:
    """The same over the wire: closing a client whose threads have writes in flight."""
    from tstreams_embedded.testing import ServeProcess

    with ServeProcess(tmp_path / "data", tmp_path, durability="sync") as server:
        with server.connect() as e:
            e.create_stream("s", partitions=WRITERS)
        returned, raised = race_writers_against_close(server.connect(), 20 * (run + 1), errors.TStreamsError)
        with server.connect() as e:
            stored = stored_items(e)
    closed_but_committed = sorted(item for item, exc in raised.items()
                                  if isinstance(exc, errors.EngineClosed) and item in stored)
    assert not closed_but_committed, f"{len(closed_but_committed)} calls raised EngineClosed but were committed"
    assert {item: tid for item, tid in stored.items() if item in returned} == returned

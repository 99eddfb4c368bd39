"""Online backup, restore and point-in-time restore from an archived commit log
(``tstreams_embedded.engine.operator.backup`` and the ``tstreams backup|restore|archive`` commands)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.engine.operator import backup as B
from tstreams_embedded.engine.operator.check import check_directory
from tstreams_embedded.testing import FakeClock
from tstreams_embedded.testing.server_process import child_environment

from .procs import start_worker
from .workers import transform


def tstreams(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tstreams_embedded.cli", *args], capture_output=True, text=True,
                          timeout=300, env=child_environment())


def read_all(engine: ts.Engine, stream: str, name: str = "check") -> list[list[bytes]]:
    c = engine.consumer(stream, name, start="oldest", use_last_offset=False)
    out = []
    while (t := c.get_transaction()) is not None:
        out.append(t.items)
    return out


@pytest.mark.timeout(300)
def test_a_backup_taken_under_a_checkpoint_group_workload_restores_input_and_output_in_agreement(
        tmp_path: Path) -> None:
    """``tstreams backup`` runs in its own process while a read-transform-write worker
    (CheckpointGroup per input transaction) writes: in the restored copy, the output is
    exactly the transform of the input up to the worker's stored offset."""
    data, out, restored = tmp_path / "data", tmp_path / "backup", tmp_path / "restored"
    with ts.open(data) as e:
        e.create_stream("in")
        e.create_stream("out")
        p = e.producer("in")
        for k in range(1500):
            p.instant([b"%d:%d" % (k, j) for j in range(1 + k % 3)])
    worker = start_worker("xform", data, 1)
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
        assert worker.stdout.readline().startswith("group")  # it is writing
        r = tstreams("backup", "--data", str(data), str(out), "--json")
        assert r.returncode == 0, r.stderr
        alive_after = worker.poll() is None
    finally:
        worker.kill()
        worker.wait()
    assert alive_after, "the backup was taken while the worker ran"
    r = tstreams("restore", str(out), "--data", str(restored))
    assert r.returncode == 0, r.stderr
    assert check_directory(str(restored)).ok
    with ts.open(restored) as e:
        offset = e.backend.get_offsets("in", "xform")[0]
        inputs = [t for t in read_all(e, "in")]
        consumed = [t.items for t in e.backend.fetch("in", 0, 0, 4096).txns if t.id <= offset]
        outputs = read_all(e, "out")
    assert 0 < len(consumed) < len(inputs), "the copy caught the worker half way"
    assert outputs == [[transform(i) for i in items] for items in consumed]


def test_restore_until_a_time_shows_exactly_what_was_acknowledged_before_it(tmp_path: Path) -> None:
    clock = FakeClock()
    data, base, archive = tmp_path / "data", tmp_path / "base", tmp_path / "archive"
    acked: list[tuple[int, int]] = []  # (clock after the ack, txn id)
    with ts.open(data, clock=clock, compaction_interval=None) as e:
        e.create_stream("s")
        e.producer("s").instant([b"before the backup"])
        B.backup(e.backend, str(base))
        with B.Archiver(e.backend, str(archive)) as archiver:
            p = e.producer("s")
            for k in range(30):
                clock.advance(10)
                txn_id = p.instant([b"k%d" % k])
                acked.append((clock(), txn_id))
                if k % 7 == 0:
                    archiver.step()  # several segments
            archiver.step()
    assert len(list(B.archive_segments(str(archive)))) > 2
    for k in (0, 13, 29):
        until, _ = acked[k]
        target = tmp_path / f"at-{k}"
        report = B.restore(str(base), str(target), archive=str(archive), until_ms=until)
        assert report.last_time_ms == until
        with ts.open(target, clock=clock) as r:  # the same time (the stream TTL counts from it)
            got = read_all(r, "s")
        assert got == [[b"before the backup"]] + [[b"k%d" % i] for i in range(k + 1)]
    full = B.restore(str(base), str(tmp_path / "all"), archive=str(archive))
    assert full.replayed == 30


def test_a_damaged_or_missing_archive_segment_is_detected_and_named(tmp_path: Path) -> None:
    data, base, archive = tmp_path / "data", tmp_path / "base", tmp_path / "archive"
    with ts.open(data, compaction_interval=None) as e:
        e.create_stream("s")
        B.backup(e.backend, str(base))
        with B.Archiver(e.backend, str(archive)) as archiver:
            for k in range(9):
                e.producer("s").instant([b"%d" % k])
                if k % 3 == 2:
                    archiver.step()
    segments = [s[0] for s in B.archive_segments(str(archive))]
    assert len(segments) == 3
    damaged = bytearray(Path(segments[1]).read_bytes())
    damaged[-3] ^= 0x10
    Path(segments[1]).write_bytes(bytes(damaged))
    with pytest.raises(errors.DataCorrupted, match=os.path.basename(segments[1])):
        B.restore(str(base), str(tmp_path / "r1"), archive=str(archive))
    assert not (tmp_path / "r1").exists() or not os.listdir(tmp_path / "r1")  # nothing half restored
    os.unlink(segments[1])
    with pytest.raises(errors.ArchiveGap, match="misses log entries"):
        B.restore(str(base), str(tmp_path / "r2"), archive=str(archive))


def test_a_damaged_backup_is_refused(tmp_path: Path) -> None:
    with ts.open(tmp_path / "data") as e:
        e.create_stream("s")
        e.producer("s").instant([b"x"])
        B.backup(e.backend, str(tmp_path / "b"))
    f = tmp_path / "b" / "data.mdb"
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2] ^= 1
    f.write_bytes(bytes(raw))
    with pytest.raises(errors.DataCorrupted, match="data.mdb is damaged"):
        B.restore(str(tmp_path / "b"), str(tmp_path / "r"))
    with pytest.raises(errors.InvalidArgument, match="new or empty"):
        B.backup(str(tmp_path / "data"), str(tmp_path / "b"))


def test_archive_command_and_a_trimmed_log_gap(tmp_path: Path) -> None:
    data, archive = tmp_path / "data", tmp_path / "archive"
    with ts.open(data, compaction_interval=None) as e:
        e.create_stream("s")
        e.producer("s").instant([b"x"])
    r = tstreams("archive", "--data", str(data), "--to", str(archive), "--once")
    assert r.returncode == 0 and "archived 2 entries" in r.stdout, r.stderr
    with ts.open(data, compaction_interval=None, log_retention=2) as e:
        for k in range(5):
            e.producer("s").instant([b"%d" % k])
        e.backend.trim_log_to_retention()
    r = tstreams("archive", "--data", str(data), "--to", str(archive), "--once")
    assert r.returncode != 0 and "ArchiveGap" in r.stderr and "Traceback" not in r.stderr


def test_backup_through_a_server(tmp_path: Path) -> None:
    """``tstreams backup --connect``: the copy is made by the server and streamed in pieces;
    it restores to the same data, and an unknown copy token is refused clearly."""
    from tstreams_embedded.testing import ServeProcess

    with ServeProcess(tmp_path / "data", tmp_path, durability="sync") as server:
        e = server.connect(timeout=20.0)
        try:
            e.create_stream("s", partitions=2)
            for k in range(50):
                e.producer("s").instant([b"%d" % k, b"x" * 5000])
            r = tstreams("backup", "--connect", server.endpoint, str(tmp_path / "b"), "--json")
            assert r.returncode == 0, r.stderr
            with pytest.raises(errors.InvalidArgument, match="no backup copy"):
                e.backend.backup_read("nope", 0, 10)
            expected = read_all(e, "s")
        finally:
            e.close()
    B.restore(str(tmp_path / "b"), str(tmp_path / "r"))
    with ts.open(tmp_path / "r") as r2:
        assert sorted(read_all(r2, "s")) == sorted(expected)

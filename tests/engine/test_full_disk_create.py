"""Creating a data directory on a full filesystem (issue 19, item 2): ``StorageFull`` (one
line from the CLI), never SIGBUS; once space is freed the same path opens as a new engine.

Runs on a real, tiny tmpfs (mounting needs root; skipped otherwise), in subprocesses: a
SIGBUS must fail the test, not kill the test run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded.testing import eventually
from tstreams_embedded.testing.ports import free_port

KIB = 1024
TSTREAMS = [sys.executable, "-c", "from tstreams_embedded.cli import run; run()"]
OPEN = [sys.executable, "-c", textwrap.dedent("""
    import sys
    import tstreams_embedded as ts
    from tstreams_embedded import errors
    try:
        ts.open(sys.argv[1], compaction_interval=None).close()
    except errors.StorageFull as exc:
        print("StorageFull:", exc)
        sys.exit(3)
""")]


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for the test (skipped where mounting is not permitted)."""
    mnt = tmp_path / "tiny-disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs to fill a real disk (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` but about ``leave`` bytes."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    st = os.statvfs(disk)
    assert st.f_bavail == 0
    os.truncate(filler, max(0, os.path.getsize(filler) - leave))
    return filler


def _command(how: str, path: Path) -> list[str]:
    if how == "open":
        return [*OPEN, str(path)]
    if how == "streams-create":
        return [*TSTREAMS, "streams", "create", "s", "--data", str(path)]
    return [*TSTREAMS, "serve", "--data", str(path), "--bind", f"tcp://127.0.0.1:{free_port()}"]


def _run(how: str, path: Path) -> subprocess.CompletedProcess[str]:
    """Run the command; a server that starts is stopped (by its PID) once its directory exists."""
    if how != "serve":
        return subprocess.run(_command(how, path), capture_output=True, text=True, timeout=60)
    proc = subprocess.Popen(_command(how, path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        eventually(lambda: proc.poll() is not None or (path / "tstreams.dir").exists(), timeout=30)
    finally:
        if proc.poll() is None:
            proc.terminate()
        out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("how", ["open", "streams-create", "serve"])
@pytest.mark.parametrize("leave", [0, 8 * KIB, 68 * KIB, 80 * KIB, 128 * KIB])
def test_creating_a_directory_on_a_full_disk_raises_storage_full_and_can_be_retried(tiny_disk: Path, how: str,
                                                                                  leave: int) -> None:
    path = tiny_disk / "new"
    filler = _fill(tiny_disk, leave)
    created = False
    r = _run(how, path)
    assert r.returncode not in (-signal.SIGBUS, 128 + signal.SIGBUS), r.stderr
    if (path / "tstreams.dir").exists():
        created = True
    else:
        assert r.returncode != 0
        assert "full" in r.stdout + r.stderr and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    os.unlink(filler)  # space freed: the same path works, as a new engine
    with ts.open(path, compaction_interval=None) as engine:
        if how == "streams-create" and created:
            assert engine.backend.get_stream("s").partitions == 1
        engine.create_stream("after")
        assert engine.producer("after").instant([b"written"]) > 0


def test_a_creation_that_never_finished_is_started_over(tmp_path: Path) -> None:
    """What a creation killed half-way leaves (the creation mark, a lock file, a data file
    with part of its first page) opens as a new engine; without the mark it stays refused."""
    from tstreams_embedded import errors

    for name, refused in (("interrupted", False), ("lost-its-data", True)):
        path = tmp_path / name
        path.mkdir()
        (path / "lock.mdb").write_bytes(b"\0" * 4096)
        if not refused:
            (path / "tstreams.creating").write_bytes(b"")
            (path / "data.mdb").write_bytes(b"\xde\xad" * 100)
        if refused:
            with pytest.raises(errors.DataCorrupted, match="lock.mdb"):
                ts.open(path, compaction_interval=None)
            continue
        with ts.open(path, compaction_interval=None) as engine:
            engine.create_stream("s")
            assert engine.producer("s").instant([b"x"]) > 0
        assert not (path / "tstreams.creating").exists() and (path / "tstreams.dir").exists()

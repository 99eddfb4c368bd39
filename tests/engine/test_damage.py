"""Damaged data directories (issue 9, items 4-6): truncated, emptied, deleted or replaced
``data.mdb``, flipped bytes, random garbage, and ``tstreams check``.

Every damage is made on real files. Opening and reading a damaged directory runs in a
subprocess wherever the old behaviour was a crash (SIGBUS), so that the test sees how the
process ends."""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import pytest
from click.testing import CliRunner

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.cli import main as cli
from tstreams_embedded.engine import chunks, directory, keys
from tstreams_embedded.engine.check import check_directory
from tstreams_embedded.testing.serve import child_environment

ITEM = b"payload-%06d-" + b"z" * 40


def _fill(path: Path, txns: int = 300, items: int = 3, partitions: int = 1) -> dict[int, list[bytes]]:
    """A directory with ``txns`` instants of ``items`` items in stream "s"; {id: items}."""
    out = {}
    with ts.open(path, compaction_interval=None, keepalive_interval=None) as e:
        e.create_stream("s", partitions=partitions)
        p = e.producer("s")
        for i in range(txns):
            batch = [ITEM % (i * items + j) for j in range(items)]
            out[p.instant(batch)] = batch
    return out


def _read_all(path: Path) -> list[list[bytes]]:
    with ts.open(path, compaction_interval=None, keepalive_interval=None) as e:
        c = e.consumer("s", "r", use_last_offset=False)
        got = []
        for part in c.partitions:
            while (t := c.get_transaction(part)) is not None:
                got.append(t.items)
        return got


READ_SCRIPT = textwrap.dedent("""
    import sys
    import tstreams_embedded as ts
    from tstreams_embedded import errors
    try:
        with ts.open(sys.argv[1], compaction_interval=None, keepalive_interval=None) as e:
            c = e.consumer("s", "r", use_last_offset=False)
            n = 0
            while c.get_transaction(0) is not None:
                n += 1
        print("read", n)
    except errors.TStreamsError as exc:
        print(type(exc).__name__, exc)
        sys.exit(3)
""")


def _read_in_subprocess(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", READ_SCRIPT, str(path)], capture_output=True, text=True,
                          timeout=120, env=child_environment())


# --------------------------------------------------------------------------- item 4: truncated
@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_truncated_data_file_is_refused_at_open_not_sigbus(tmp_path, keep) -> None:
    path = tmp_path / "d"
    _fill(path)
    data = path / "data.mdb"
    size = data.stat().st_size
    os.truncate(data, int(size * keep) // 4096 * 4096)
    r = _read_in_subprocess(path)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)  # -7 would be SIGBUS
    assert r.stdout.startswith("DataCorrupted") and "truncated" in r.stdout, r.stdout
    with pytest.raises(errors.DataCorrupted, match="truncated"):
        ts.open(path)


# --------------------------------------------------------------------------- item 5: lost data file
@pytest.mark.parametrize("damage", ["empty", "deleted"])
def test_initialised_directory_without_its_data_is_refused(tmp_path, damage) -> None:
    path = tmp_path / "d"
    _fill(path, txns=5)
    data = path / "data.mdb"
    if damage == "empty":
        os.truncate(data, 0)
    else:
        data.unlink()
    assert (path / "lock.mdb").exists()
    with pytest.raises(errors.DataCorrupted, match="data was lost") as err:
        ts.open(path)
    assert "backup" in str(err.value) and directory.MARKER in str(err.value)  # the message names the fix
    assert not data.exists() or data.stat().st_size == 0  # nothing was created
    # without the marker (an older version's directory), lock.mdb alone is refused too
    (path / directory.MARKER).unlink()
    with pytest.raises(errors.DataCorrupted, match="lock.mdb"):
        ts.open(path)
    # the documented way to start over
    (path / "lock.mdb").unlink()
    data.unlink(missing_ok=True)
    with ts.open(path) as e:
        assert e.list_streams() == []


def test_data_file_of_another_directory_is_refused(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _fill(a, txns=3)
    _fill(b, txns=4)
    (a / "data.mdb").write_bytes((b / "data.mdb").read_bytes())
    with pytest.raises(errors.DataCorrupted, match="does not belong to this directory"):
        ts.open(a)


def test_marker_is_written_readable_and_checked(tmp_path) -> None:
    path = tmp_path / "d"
    with ts.open(path):
        pass
    marker = path / directory.MARKER
    assert stat.S_IMODE(marker.stat().st_mode) == 0o644
    doc = json.loads(marker.read_text())
    assert doc["format"] == directory.MARKER_FORMAT and len(doc["directory_id"]) == 32
    marker.write_text("{not json")
    with pytest.raises(errors.DataCorrupted, match="damaged"):
        ts.open(path)


def _make_legacy(path: Path) -> None:
    """Turn a directory into what older versions wrote: no marker, no directory id, no
    format key, unsealed chunks."""
    (path / directory.MARKER).unlink()
    env = lmdb.open(str(path), max_dbs=16)
    meta, data = env.open_db(b"meta"), env.open_db(b"data")
    with env.begin(write=True) as txn:
        txn.delete(directory.ID_KEY, db=meta)
        txn.delete(directory.FORMAT_KEY, db=meta)
        for k, v in list(txn.cursor(db=data)):
            assert v[0] == chunks.TAG
            txn.put(k, v[chunks.HEAD_LEN:], db=data)
    env.close()


def test_directories_of_older_versions_open_and_get_their_marker(tmp_path) -> None:
    path = tmp_path / "d"
    written = _fill(path, txns=20)
    _make_legacy(path)
    assert sorted(map(tuple, _read_all(path))) == sorted(map(tuple, written.values()))
    assert directory.read_marker(str(path)) is not None  # marked at that open
    with ts.open(path, compaction_interval=None) as e:  # new chunks are sealed, old ones stay readable
        e.producer("s").instant([b"new"])
        assert e.backend.store.legacy_chunks  # type: ignore[attr-defined]
    assert len(_read_all(path)) == 21
    assert check_directory(str(path)).ok


# --------------------------------------------------------------------------- item 6: checksums
def _flip_in_chunk(path: Path, needle: bytes) -> None:
    """Flip one byte inside the stored item ``needle`` wherever the file holds it (its chunk,
    and its copy in the commit log, which is not checksummed)."""
    data = path / "data.mdb"
    raw = bytearray(data.read_bytes())
    at = raw.find(needle)
    assert at > 0
    while at >= 0:
        raw[at + len(needle) // 2] ^= 0x20
        at = raw.find(needle, at + 1)
    data.write_bytes(bytes(raw))


def test_flipped_byte_in_a_chunk_raises_data_corrupted_with_its_location(tmp_path) -> None:
    path = tmp_path / "d"
    written = _fill(path, txns=100)
    ids = sorted(written)
    victim = ids[37]
    _flip_in_chunk(path, written[victim][1])
    with ts.open(path, compaction_interval=None, keepalive_interval=None) as e:
        c = e.consumer("s", "r", use_last_offset=False)
        for tid in ids[:37]:
            assert c.get_transaction(0).items == written[tid]
        with pytest.raises(errors.DataCorrupted, match="checksum") as err:
            c.get_transaction(0)
        assert (err.value.stream, err.value.partition, err.value.txn_id) == ("s", 0, victim)
        assert str(victim) in str(err.value)
        with pytest.raises(errors.DataCorrupted):
            c.get_transaction_by_id(0, victim)
        assert c.get_transaction_by_id(0, ids[38]).items == written[ids[38]]
    report = check_directory(str(path))
    assert not report.ok and len(report.problems) == 1 and str(victim) in report.problems[0]


def test_random_garbage_never_reads_back_wrong_data_nor_raw_lmdb_errors(tmp_path) -> None:
    rnd = random.Random(9)
    for trial in range(6):
        path = tmp_path / f"d{trial}"
        written = _fill(path, txns=100)
        data = path / "data.mdb"
        raw = bytearray(data.read_bytes())
        start = rnd.randrange(2 * 4096, len(raw) - 512)  # past the two meta pages
        raw[start:start + 256] = rnd.randbytes(256)
        data.write_bytes(bytes(raw))
        r = subprocess.run([sys.executable, "-c", GARBAGE_SCRIPT, str(path), json.dumps(
            {str(k): [i.decode() for i in v] for k, v in written.items()})],
            capture_output=True, text=True, timeout=120, env=child_environment())
        assert r.returncode in (0, 3), (trial, r.returncode, r.stdout, r.stderr)
        assert "WRONG" not in r.stdout, r.stdout


GARBAGE_SCRIPT = textwrap.dedent("""
    import json, sys
    import tstreams_embedded as ts
    from tstreams_embedded import errors
    written = {int(k): [i.encode() for i in v] for k, v in json.loads(sys.argv[2]).items()}
    try:
        with ts.open(sys.argv[1], compaction_interval=None, keepalive_interval=None) as e:
            c = e.consumer("s", "r", use_last_offset=False)
            for tid in sorted(written):
                try:
                    t = c.get_transaction_by_id(0, tid)
                except errors.DataCorrupted:
                    continue
                if t is not None and t.items != written[tid]:
                    print("WRONG", tid)
    except errors.TStreamsError as exc:
        print(type(exc).__name__, exc)
        sys.exit(3)
""")


def test_unsealed_chunk_in_a_new_directory_is_damage(tmp_path) -> None:
    path = tmp_path / "d"
    written = _fill(path, txns=2)
    env = lmdb.open(str(path), max_dbs=16)
    data = env.open_db(b"data")
    with env.begin(write=True) as txn:
        k, v = next(iter(txn.cursor(db=data)))
        txn.put(k, v[chunks.HEAD_LEN:], db=data)  # strip the seal
    env.close()
    with ts.open(path, compaction_interval=None) as e, pytest.raises(errors.DataCorrupted, match="unsealed"):
        e.consumer("s", "r").get_transaction_by_id(0, min(written))


def test_chunk_codec() -> None:
    payload = ts.engine.ops.pack_items([b"a", b"bc"]) if hasattr(ts, "engine") else None
    from tstreams_embedded.engine.ops import pack_items

    payload = pack_items([b"a", b"bc"])
    sealed = chunks.seal(payload)
    assert sealed[0] == chunks.TAG and sealed[chunks.HEAD_LEN:] == payload
    assert chunks.items_of(sealed, legacy=False) == [b"a", b"bc"]
    assert chunks.items_of(payload, legacy=True) == [b"a", b"bc"]
    for bad in (payload, b"", b"\xc1\x00", b"garbage", sealed[:-1], sealed[:5] + b"\x92\xc4"):
        with pytest.raises(errors.DataCorrupted):
            chunks.items_of(bad, legacy=False)
    with pytest.raises(errors.DataCorrupted):
        chunks.items_of(b"\x92\x01", legacy=True)  # an array that does not decode


# --------------------------------------------------------------------------- tstreams check
def _damage_keys(path: Path) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    streams, parts, txns, data, offsets = (env.open_db(n) for n in (b"streams", b"parts", b"txns", b"data",
                                                                     b"offsets"))
    with env.begin(write=True) as txn:
        sid = next(iter(txn.cursor(db=streams)))[1][1]  # msgpack [id, ...]: fixint after 0x95
        t_keys = [k for k, _ in txn.cursor(db=txns)]
        txn.delete(keys.chunk_key(sid, 0, keys.txn_id_of(t_keys[3]), 0), db=data)  # a missing chunk
        txn.put(keys.chunk_key(sid, 0, 12345, 0), chunks.seal(b"\x91\xc4\x01x"), db=data)  # an orphan
        txn.put(keys.part_key(sid, 0), keys.U64.pack(keys.txn_id_of(t_keys[-1]) - 1), db=parts)
        txn.put(keys.offset_key(999, "ghost", 0), keys.U64.pack(1), db=offsets)
    env.close()


def test_check_command_reports_every_kind_of_problem(tmp_path) -> None:
    path = tmp_path / "d"
    written = _fill(path, txns=10)
    with ts.open(path, compaction_interval=None) as e:
        c = e.consumer("s", "c")
        c.get_transaction(0)
        c.checkpoint()
    runner = CliRunner()
    ok = runner.invoke(cli, ["check", "--data", str(path)])
    assert ok.exit_code == 0 and "OK: no problems found" in ok.output, ok.output
    doc = json.loads(runner.invoke(cli, ["check", "--data", str(path), "--json"]).output)
    assert doc["ok"] and doc["counts"]["transactions"] == 10 and doc["counts"]["items"] == 30

    _damage_keys(path)
    _flip_in_chunk(path, written[sorted(written)[6]][2])
    res = runner.invoke(cli, ["check", "--data", str(path), "--json"])
    assert res.exit_code == 1
    problems = "\n".join(json.loads(res.output)["problems"])
    assert "has chunks [], its record says 1" in problems
    assert "orphan chunk" in problems
    assert "above the partition's last allocated id" in problems
    assert "consumer 'ghost'" in problems
    assert "checksum mismatch" in problems
    text = runner.invoke(cli, ["check", "--data", str(path)])
    assert text.exit_code == 1 and "DAMAGED: 5 problem(s)" in text.output, text.output


def test_check_command_on_a_truncated_or_garbage_file(tmp_path) -> None:
    path = tmp_path / "d"
    _fill(path, txns=50)
    os.truncate(path / "data.mdb", 3 * 4096)
    report = check_directory(str(path))
    assert not report.ok
    (path / "data.mdb").write_bytes(os.urandom(64 * 1024))
    report = check_directory(str(path))
    assert not report.ok and report.problems

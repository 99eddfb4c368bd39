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
from tstreams_embedded.engine.operator.check import check_directory
from tstreams_embedded.engine.protocol.ops import StoreWrite
from tstreams_embedded.engine.storage import chunks, directory, keys, seals
from tstreams_embedded.testing.server_process import child_environment

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


def _unseal_values(env: lmdb.Environment) -> None:
    """Strip the seal of every value (what versions before sealed values wrote)."""
    with env.begin(write=True) as txn:
        for name in directory.SEALED_DBS:
            db = env.open_db(name.encode(), txn=txn)
            for k, v in list(txn.cursor(db=db)):
                if name != "meta" or k not in directory.UNSEALED_META:
                    assert seals.is_sealed(k, v)
                    txn.put(k, v[:-seals.SEAL_LEN], db=db)


def _make_legacy(path: Path) -> None:
    """Turn a directory into what older versions wrote: no marker, no directory id, no
    format key, unsealed chunks, unsealed values."""
    (path / directory.MARKER).unlink()
    env = lmdb.open(str(path), max_dbs=16)
    _unseal_values(env)
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
    payload = ts.engine.protocol.ops.pack_items([b"a", b"bc"]) if hasattr(ts, "engine") else None
    from tstreams_embedded.engine.protocol.ops import pack_items

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
        pkey, okey = keys.part_key(sid, 0), keys.offset_key(999, "ghost", 0)  # forged, correctly sealed
        txn.put(pkey, seals.seal(pkey, keys.U64.pack(keys.txn_id_of(t_keys[-1]) - 1)), db=parts)
        txn.put(okey, seals.seal(okey, keys.U64.pack(1)), db=offsets)
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


# --------------------------------------------------------------------------- sealed values (issue 19, item 1)
FLIP_WORKER = Path(__file__).parent / "flip_worker.py"


def _flip_value(path: Path, db: str, key: bytes) -> None:
    """Flip one bit in the middle of the stored value of ``key`` in ``db``, in the file (an
    LMDB leaf node holds the key, then the value; the same bit of stale copies too)."""
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    with env.begin() as txn:
        value = txn.get(key, db=env.open_db(db.encode(), txn=txn, create=False))
    env.close()
    assert value is not None
    raw = bytearray((path / "data.mdb").read_bytes())
    at = raw.find(key + value)
    assert at > 0
    while at >= 0:  # the live page and any stale copy of it in free pages
        raw[at + len(key) + len(value) // 2] ^= 0x04
        at = raw.find(key + value, at + 1)
    (path / "data.mdb").write_bytes(bytes(raw))


SEALED_KINDS = {  # what to damage -> (db, key of the victim, the read that must fail, words of the message)
    "transaction record": ("txns", lambda sid, tid: keys.txn_key(sid, 1, tid),
                           lambda e, tid: e.backend.get_transaction("s", 1, tid), "transaction record"),
    "offset": ("offsets", lambda sid, tid: keys.offset_key(sid, "c", 0),
               lambda e, tid: e.backend.get_offsets("s", "c"), "offset of consumer 'c'"),
    "marker": ("markers", lambda sid, tid: b"m", lambda e, tid: e.backend.get_marker("m"), "marker 'm'"),
    "state value": ("state", lambda sid, tid: b"app/counts\x00key-00150",
                    lambda e, tid: e.backend.store_get("app/counts", b"key-00150"), "'key-00150'"),
    "state scan": ("state", lambda sid, tid: b"app/counts\x00key-00150",
                   lambda e, tid: e.backend.store_range("app/counts"), "state store 'app/counts'"),
    "lease": ("state", lambda sid, tid: b"app/group\x00task-2",
              lambda e, tid: e.backend.store_get("app/group", b"task-2"), "'task-2'"),
    "commit log": ("log", lambda sid, tid: keys.U64.pack(3), lambda e, tid: e.backend.read_log(0),
                   "commit-log entry 3"),
    "catalog": ("streams", lambda sid, tid: b"s", lambda e, tid: e.get_stream("s"), "catalog record of stream 's'"),
    "partition head": ("parts", lambda sid, tid: keys.part_key(sid, 1), lambda e, tid: e.backend.last_txn_id("s", 1),
                       "last allocated transaction ID"),
}


@pytest.mark.parametrize("kind", list(SEALED_KINDS))
def test_a_flipped_bit_in_any_stored_value_raises_data_corrupted_naming_it(tmp_path, kind) -> None:
    path = tmp_path / "d"
    subprocess.run([sys.executable, str(FLIP_WORKER), "fill", str(path)], check=True, env=child_environment())
    with ts.open(path, compaction_interval=None) as e:
        sid = e.get_stream("s").id
        tid = e.backend.transactions_range("s", 1, 0, 2**63 - 1)[5].id
    db, key, read, words = SEALED_KINDS[kind]
    _flip_value(path, db, key(sid, tid))
    with ts.open(path, compaction_interval=None, keepalive_interval=None) as e, \
            pytest.raises(errors.DataCorrupted, match="checksum mismatch") as err:
        read(e, tid)
    assert words in str(err.value) and "tstreams check" in str(err.value)
    report = check_directory(str(path))
    assert not report.ok and any("checksum mismatch" in p and f"{db!r}" in p for p in report.problems), \
        report.problems


def _run_flips(src: Path, work: Path, seed: int, count: int) -> list[dict[str, object]]:
    """Run the flips in worker subprocesses; one that crashes (a damaged page can make LMDB
    itself fault) is recorded as ``crash`` and the next one starts after it."""
    done: list[dict[str, object]] = []
    first = 0
    while first < count:
        r = subprocess.run([sys.executable, str(FLIP_WORKER), "flip", str(src), str(work), str(seed),
                            str(count - first), str(first)], capture_output=True, text=True, timeout=600,
                           env=child_environment())
        rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        finished = [row for row in rows if row["outcome"] not in ("started", "pristine")]
        done += finished
        started = [row for row in rows if row["outcome"] == "started"]
        if r.returncode == 0:
            break
        assert r.returncode < 0 and started, (r.returncode, r.stderr[-3000:])  # only a signal may end it
        crashed = started[-1]
        done.append({**crashed, "outcome": f"crash (signal {-r.returncode})", "check_ok": False})
        first = int(crashed["flip"]) + 1  # type: ignore[call-overload]
    return done


@pytest.mark.parametrize("seed", [1, 19])
def test_no_single_bit_flip_silently_changes_what_the_engine_returns_or_what_check_reports(tmp_path, seed) -> None:
    """Flip one bit of ``data.mdb`` at a time (seeded), read everything the engine returns
    (streams, transactions, offsets, consumers, a marker, a state store, leases, the commit
    log) and run ``tstreams check``: each flip leaves the answer as it was, or the read raises
    DataCorrupted and check reports damage. Before values were sealed, 9 of 150 flips changed
    the answer silently."""
    src = tmp_path / "src"
    subprocess.run([sys.executable, str(FLIP_WORKER), "fill", str(src)], check=True, env=child_environment())
    results = _run_flips(src, tmp_path / "work", seed, 75)
    assert len(results) == 75
    silent = [r for r in results if r["outcome"] not in ("same", "corrupted") and not
              str(r["outcome"]).startswith("crash")]
    assert not silent, silent
    unreported = [r for r in results if r["outcome"] != "same" and r["check_ok"]]
    assert not unreported, unreported
    assert any(r["outcome"] == "corrupted" for r in results)  # the flips did reach stored values


@pytest.mark.soak
def test_many_single_bit_flips(tmp_path) -> None:
    src = tmp_path / "src"
    subprocess.run([sys.executable, str(FLIP_WORKER), "fill", str(src)], check=True, env=child_environment())
    for seed in range(100, 110):
        results = _run_flips(src, tmp_path / f"work{seed}", seed, 200)
        assert not [r for r in results if r["outcome"] not in ("same", "corrupted")
                    and not str(r["outcome"]).startswith("crash")]
        assert not [r for r in results if r["outcome"] != "same" and r["check_ok"]]


def _branch_pages(raw: bytes, psize: int = 4096) -> list[int]:
    """Offsets of the LMDB branch pages in a data file (page header: pgno u64, pad u16,
    flags u16 with P_BRANCH = 0x01, lower u16, upper u16)."""
    out = []
    for at in range(2 * psize, len(raw), psize):
        flags = int.from_bytes(raw[at + 10:at + 12], "little")
        if flags & 0x01 and not flags & 0x02:
            out.append(at)
    return out


@pytest.mark.parametrize("bit", [0x01, 0x02])
def test_a_damaged_branch_key_never_silently_hides_or_adds_state_entries(tmp_path, bit) -> None:
    """A flipped bit in a branch page's separator key sends lookups and seeks to the wrong
    leaf: gets would miss an entry, range reads would start beside their range. Reads
    verify where a seek landed and what a miss missed, so each either answers as before or
    raises DataCorrupted; ``tstreams check`` finds every entry a lookup misses."""
    path = tmp_path / "d"
    key = b"key-%05d".__mod__
    with ts.open(path, compaction_interval=None) as e:
        for lo in range(0, 3000, 100):
            e.backend.submit([StoreWrite("app/counts", [[key(i), b"v" * 100] for i in range(lo, lo + 100)])])
    raw = bytearray((path / "data.mdb").read_bytes())
    pages = _branch_pages(bytes(raw))
    assert pages
    for at in pages:  # the live root and its stale copies alike: the separator key of the middle node
        lower = int.from_bytes(raw[at + 12:at + 14], "little")
        nodes = (lower - 16) // 2
        node = at + int.from_bytes(raw[at + 16 + 2 * (nodes // 2):at + 18 + 2 * (nodes // 2)], "little")
        ksize = int.from_bytes(raw[node + 6:node + 8], "little")
        raw[node + 8 + ksize - 1] ^= bit  # the last digit of the separator key
    (path / "data.mdb").write_bytes(bytes(raw))
    damaged = 0
    with ts.open(path, compaction_interval=None, keepalive_interval=None) as e:
        for i in range(3000):
            try:
                assert e.backend.store_get("app/counts", key(i)) == b"v" * 100, i
            except errors.DataCorrupted:
                damaged += 1
        for lo in range(0, 3000, 100):
            try:
                got = e.backend.store_range("app/counts", key(lo), key(lo + 100))
                assert [k for k, _ in got] == [key(i) for i in range(lo, lo + 100)], lo
            except errors.DataCorrupted:
                damaged += 1
    assert damaged  # the flip did send some lookup astray, and it was reported
    assert not check_directory(str(path)).ok


@pytest.mark.parametrize("name", ["parts", "txns", "offsets", "state", "log"])
def test_a_lost_database_record_is_refused_not_started_empty(tmp_path, name) -> None:
    """A damaged record in LMDB's main database makes a named database disappear; opening
    it would create it empty (every partition head 0, every state entry gone) silently."""
    path = tmp_path / "d"
    _fill(path, txns=5)
    with ts.open(path, compaction_interval=None) as e:
        e.backend.submit([StoreWrite("app/s", [[b"k", b"v"]])])
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(name.encode(), txn=txn), delete=True)
    env.close()
    with pytest.raises(errors.DataCorrupted, match=f"database\\(s\\) \\['{name}'\\] are missing"):
        ts.open(path)
    assert not check_directory(str(path)).ok

"""Directories written by older versions open, read and keep numbering their commit log.

``fixtures/format1.tar.gz`` was written by the code before the commit-log sequence moved
from ``meta`` (updated by every commit) to the log's own last key (marker format 1), with
``fixtures/make_format1.py``: stream ``s`` (2 partitions) with six 3-item instant
transactions (two of them in one millisecond), consumer ``c`` checkpointed after the first
transaction of partition 0, and the whole log (8 entries) trimmed away, so the sequence
survives only in ``meta``.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import lmdb
import pytest

import tstreams_embedded as ts
from tstreams_embedded.engine.operator import check
from tstreams_embedded.engine.storage import directory, keys, seals

FIXTURE = Path(__file__).parent / "fixtures" / "format1.tar.gz"
OLD_LOG_SEQ = 8


@pytest.fixture
def old_dir(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tf:
        tf.extractall(tmp_path, filter="data")
    return tmp_path / "format1"


def _marker_format(path: Path) -> int:
    return int(json.loads((path / directory.MARKER).read_text())["format"])


def test_a_format_1_directory_reads_and_continues_its_log(old_dir: Path) -> None:
    assert _marker_format(old_dir) == 1
    with ts.open(str(old_dir), compaction_interval=None) as engine:
        assert engine.backend.log_seq() == OLD_LOG_SEQ  # only meta has it: the log was trimmed empty
        consumer = engine.consumer("s", name="c")  # resumes after its stored offset
        items = []
        while (t := consumer.get_transaction(0)) is not None:
            items.extend(t.items)
        assert items == [b"item-2-0", b"item-2-1", b"item-2-2", b"item-4-0", b"item-4-1", b"item-4-2"]
        every = engine.consumer("s", name="all", start="oldest")
        assert [len(t.items) for t in iter(lambda: every.get_transaction(1), None)] == [3, 3, 3]
        new_id = engine.producer("s").instant([b"new"], partition=1)
        assert engine.backend.log_seq() == OLD_LOG_SEQ + 1  # numbering continues, never reuses a number
        [(seq, _now, ops)] = engine.backend.read_log(0)
        assert seq == OLD_LOG_SEQ + 1 and ops[0].txn_id == new_id
    assert _marker_format(old_dir) == directory.MARKER_FORMAT  # upgraded in place
    report = check.check_directory(str(old_dir))
    assert report.ok, report.problems


def test_a_trimmed_empty_log_keeps_its_sequence(tmp_path: Path) -> None:
    with ts.open(str(tmp_path / "d"), compaction_interval=None) as engine:
        engine.create_stream("s")
        for i in range(5):
            engine.producer("s").instant([b"%d" % i])
        seq = engine.backend.log_seq()
        assert engine.backend.trim_log(seq) == seq
        assert engine.backend.read_log(0) == [] and engine.backend.log_seq() == seq
        engine.producer("s").instant([b"after"])
        assert [e[0] for e in engine.backend.read_log(0)] == [seq + 1]
    with ts.open(str(tmp_path / "d"), compaction_interval=None) as engine:
        assert engine.backend.log_seq() == seq + 1


def test_older_code_refuses_a_format_2_directory_marker(tmp_path: Path) -> None:
    """A marker format this version does not know is refused with a clear error (that is
    how a format-1 engine refuses a directory this version upgraded)."""
    with ts.open(str(tmp_path / "d")):
        pass
    doc = json.loads((tmp_path / "d" / directory.MARKER).read_text())
    doc["format"] = 99
    (tmp_path / "d" / directory.MARKER).write_text(json.dumps(doc))
    with pytest.raises(ts.errors.DataCorrupted, match="unknown marker format 99"):
        ts.open(str(tmp_path / "d"))


def test_ids_keep_growing_after_compaction_removed_a_partitions_newest_record(tmp_path: Path) -> None:
    """IDs never repeat in a partition after compaction removed its newest record, even if
    the clock goes back (the partition's last allocated ID is kept apart from the records)."""
    now = [1_700_000_000_000]
    with ts.open(str(tmp_path / "d"), clock=lambda: now[0], compaction_interval=None) as engine:
        engine.create_stream("s", partitions=2, ttl=1)
        p = engine.producer("s")
        first = [p.instant([b"a%d" % i], partition=0) for i in range(3)]
        p.instant([b"other"], partition=1)
        high = engine.backend.last_txn_id("s", 0)
        assert high == first[-1]
        now[0] += 5_000
        assert engine.compact()["transactions_removed"] == 4
        assert engine.stats()["transactions"] == 0
        assert engine.backend.last_txn_id("s", 0) == high
        now[0] -= 10_000  # a clock that went back must not reuse an ID
        again = p.instant([b"b"], partition=0)
        assert again > high
        assert engine.backend.last_txn_id("s", 0) == again
    report = check.check_directory(str(tmp_path / "d"))
    assert report.ok, report.problems


def test_check_of_a_format_1_directory_still_verifies_parts(old_dir: Path) -> None:
    """Every allocation writes ``parts``, so a record above it is damage; ``check`` finds it in a
    directory written by format-1 code, and checking never upgrades the directory."""
    assert check.check_directory(str(old_dir)).ok
    env = lmdb.open(str(old_dir), max_dbs=16)
    streams, parts, txns = (env.open_db(n) for n in (b"streams", b"parts", b"txns"))
    with env.begin(write=True) as txn:
        sid = next(iter(txn.cursor(db=streams)))[1][1]  # msgpack [id, ...]: fixint after 0x95
        newest = max(keys.txn_id_of(k) for k, _ in txn.cursor(db=txns) if k[:12] == keys.part_key(sid, 0))
        txn.put(keys.part_key(sid, 0), keys.U64.pack(newest - 1), db=parts)
    env.close()
    report = check.check_directory(str(old_dir))
    assert not report.ok
    assert any("above the partition's last allocated id" in p for p in report.problems), report.problems
    assert _marker_format(old_dir) == 1  # checking never upgrades


def _stored_values(path: Path) -> dict[tuple[str, bytes], bytes]:
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    out = {}
    with env.begin() as txn:
        for name in directory.SEALED_DBS:
            try:
                db = env.open_db(name.encode(), txn=txn, create=False)
            except lmdb.NotFoundError:
                continue
            out.update({(name, bytes(k)): bytes(v) for k, v in txn.cursor(db=db)})
    env.close()
    return out


def test_a_format_1_directory_is_sealed_in_place_once(old_dir: Path) -> None:
    """Opening an older directory for writing seals every value in place (data format 2,
    marker format 3); opening it again does not seal anything twice; a flipped bit in an
    upgraded value is then found like in a new directory."""
    before = _stored_values(old_dir)
    assert not any(seals.is_sealed(k, v) for (name, k), v in before.items() if k not in directory.UNSEALED_META)
    with ts.open(str(old_dir), compaction_interval=None):
        pass
    after = _stored_values(old_dir)
    for (name, k), v in before.items():
        if name == "meta" and k in directory.UNSEALED_META:
            continue
        assert after[(name, k)] == seals.seal(k, v), (name, k)
    assert keys.U64.unpack(after[("meta", directory.FORMAT_KEY)])[0] == directory.DATA_FORMAT
    assert _marker_format(old_dir) == directory.MARKER_FORMAT == 3
    with ts.open(str(old_dir), compaction_interval=None) as engine:  # a second open changes nothing
        assert engine.consumer("s", name="c").get_transaction(0).items == [b"item-2-0", b"item-2-1", b"item-2-2"]
    assert _stored_values(old_dir) == after
    assert check.check_directory(str(old_dir)).ok


def test_a_read_only_check_never_upgrades_and_reads_unsealed_values(old_dir: Path) -> None:
    before = _stored_values(old_dir)
    report = check.check_directory(str(old_dir))
    assert report.ok, report.problems
    assert report.counts["transactions"] == 6 and report.counts["items"] == 18
    assert _stored_values(old_dir) == before


def test_a_marker_of_sealed_values_over_an_unsealed_data_file_is_refused(old_dir: Path) -> None:
    doc = json.loads((old_dir / directory.MARKER).read_text())
    doc["format"] = directory.MARKER_FORMAT  # a marker that says "sealed" over format-1 data
    (old_dir / directory.MARKER).write_text(json.dumps(doc))
    with pytest.raises(ts.errors.DataCorrupted, match="every value is sealed"):
        ts.open(str(old_dir))


def _drop_database(path, name: str, forget: bool) -> None:
    """Make ``path`` look as if database ``name`` never existed (``forget``: also without the
    note that it was added), or as if its record in LMDB's main database were lost."""
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(name.encode(), txn=txn), delete=True)
        if forget:
            txn.delete(directory.added_database_key(name), db=env.open_db(b"meta", txn=txn))
    env.close()


def test_a_directory_from_before_work_queues_opens_and_gets_them(tmp_path) -> None:
    """A directory written before the ``queues`` database existed opens (it is created then),
    keeps its data, and takes work queues; losing the database afterwards is damage."""
    path = tmp_path / "d"
    with ts.open(path) as e:
        e.create_stream("s")
        e.producer("s").instant([b"kept"])
    _drop_database(path, "queues", forget=True)
    with ts.open(path) as e:
        assert e.consumer("s", "c").get_transaction().items == [b"kept"]
        [d] = e.work_queue("s", "g").receive(timeout=0)
        d.ack()
    assert check.check_directory(str(path)).ok
    _drop_database(path, "queues", forget=False)
    with pytest.raises(ts.errors.DataCorrupted, match=r"\['queues'\] are missing"):
        ts.open(path)

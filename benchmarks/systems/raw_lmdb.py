"""Raw py-lmdb: the physical limit of the storage this project is built on.

One key per item (16-byte big-endian ``stream, partition, seq``) in a *named* database,
written with ``putmulti(append=True)`` whose ``(consumed, added)`` is checked: appending into
the main DB while named DBs exist silently adds nothing. Durable commits (``sync=True``,
``metasync=True``, LMDB's defaults). No transaction records, no IDs, no TTLs: this is the
floor under any queue on LMDB, not a queue.
"""

from __future__ import annotations

import itertools
import struct
import time
from typing import Any

from benchmarks.systems.base import Outcome, System, items_range, make_item, run_threads, transform

KEY = struct.Struct(">IIQ")  # stream, partition, seq
IN, OUT = 1, 2


class RawLmdb(System):
    name = "lmdb-raw"
    label = "raw py-lmdb (durable)"
    description = "py-lmdb, sync=True, named DBs, key per item, putmulti(append=True)"

    map_size = 16 << 30
    sync = True

    def open(self) -> None:
        import lmdb

        self.env = lmdb.open(str(self.workdir / "lmdb"), map_size=self.map_size, max_dbs=8, sync=self.sync,
                             metasync=self.sync, readahead=False, lock=True)
        self.items = self.env.open_db(b"items")
        self.offsets = self.env.open_db(b"offsets")
        self.streams = self.env.open_db(b"streams")

    def close(self) -> None:
        env = getattr(self, "env", None)
        if env is not None:
            env.close()
            self.env = None

    def _entries(self, db) -> int:
        with self.env.begin() as txn:
            return txn.stat(db)["entries"]

    def _append(self, txn, db, pairs: list[tuple[bytes, bytes]]) -> None:
        consumed, added = txn.cursor(db=db).putmulti(pairs, append=True)
        if (consumed, added) != (len(pairs), len(pairs)):
            raise RuntimeError(f"putmulti stored {added} of {len(pairs)} items")

    def _preload(self, n_items: int) -> None:
        for start in range(0, n_items, 10_000):
            pairs = [(KEY.pack(IN, 0, i), make_item(i)) for i in range(start, min(n_items, start + 10_000))]
            with self.env.begin(write=True) as txn:
                self._append(txn, self.items, pairs)

    # 1 ---------------------------------------------------------------------------------
    def run_produce(self, n_items: int, batch: int) -> Outcome:
        items = items_range(0, batch)
        pack = KEY.pack
        lat = []
        clock = time.perf_counter_ns
        seq = 0
        t0 = time.perf_counter()
        for _ in range(n_items // batch):
            s = clock()
            with self.env.begin(write=True) as txn:
                self._append(txn, self.items, [(pack(IN, 0, seq + j), item) for j, item in enumerate(items)])
            seq += batch
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        return Outcome(n_items, seconds, lat, stored=self._entries(self.items), expected=n_items)

    # 2 ---------------------------------------------------------------------------------
    def run_concurrent(self, threads: int, per_thread: int) -> Outcome:
        item = make_item(0)
        env, db, pack, unpack = self.env, self.items, KEY.pack, KEY.unpack

        def factory(t: int):
            def op(i: int) -> None:
                with env.begin(write=True, db=db) as txn:  # LMDB serialises writers; one fsync each
                    cur = txn.cursor()
                    seq = unpack(cur.key())[2] + 1 if cur.last() else 0
                    cur.put(pack(IN, 0, seq), item, append=True)

            return op

        seconds, lat = run_threads(threads, per_thread, factory)
        n = threads * per_thread
        return Outcome(n, seconds, lat, stored=self._entries(self.items), expected=n)

    # 3 ---------------------------------------------------------------------------------
    def setup_consume(self, n_items: int, batch: int) -> None:
        self._preload(n_items)

    def run_consume(self, n_items: int, batch: int) -> Outcome:
        env, items_db, offsets_db = self.env, self.items, self.offsets
        nxt = KEY.pack(IN, 0, 0)
        last = None
        n = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while True:
            s = clock()
            with env.begin(db=items_db) as txn:
                cur = txn.cursor()
                got = list(itertools.islice(cur.iternext(), batch)) if cur.set_range(nxt) else []
            if not got:
                break
            n += len(got)
            last = got[-1][0]
            nxt = KEY.pack(*KEY.unpack(last)[:2], KEY.unpack(last)[2] + 1)
            with env.begin(write=True, db=offsets_db) as w:  # durable offset commit
                w.put(b"c", last)
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        with env.begin(db=offsets_db) as txn:
            ok = txn.get(b"c") == last
        return Outcome(n, seconds, lat, stored=n if ok else -1, expected=n_items)

    # 4 ---------------------------------------------------------------------------------
    def setup_exactly_once(self, n_items: int, batch: int) -> None:
        self._preload(n_items)

    def run_exactly_once(self, n_items: int, batch: int) -> Outcome:
        env, items_db, offsets_db = self.env, self.items, self.offsets
        pack, unpack = KEY.pack, KEY.unpack
        nxt = pack(IN, 0, 0)
        last = None
        n = 0
        out_seq = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while True:
            s = clock()
            with env.begin(write=True) as txn:  # read, write outputs and the offset atomically
                cur = txn.cursor(db=items_db)
                got = list(itertools.islice(cur.iternext(), batch)) if cur.set_range(nxt) else []
                got = [kv for kv in got if kv[0][:4] == nxt[:4]]
                if not got:
                    break
                out = [(pack(OUT, 0, out_seq + j), transform(v)) for j, (_k, v) in enumerate(got)]
                self._append(txn, items_db, out)
                last = got[-1][0]
                txn.put(b"c", last, db=offsets_db)
            out_seq += len(got)
            n += len(got)
            nxt = pack(IN, 0, unpack(last)[2] + 1)
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        with env.begin() as txn:
            ok = txn.get(b"c", db=offsets_db) == last
            cur = txn.cursor(db=items_db)
            stored = 0
            if cur.set_range(pack(OUT, 0, 0)):
                stored = sum(1 for _ in cur.iternext(values=False))
        return Outcome(n, seconds, lat, stored=stored if ok else -1, expected=n_items)

    # 5 ---------------------------------------------------------------------------------
    def run_many_streams(self, n_streams: int, batch: int, **_: Any) -> Outcome:
        item = make_item(0)
        pack = KEY.pack
        base = 10
        t0 = time.perf_counter()
        for start in range(0, n_streams, batch):
            ids = range(base + start, base + min(n_streams, start + batch))
            with self.env.begin(write=True) as txn:
                meta = txn.cursor(db=self.streams)
                for i in ids:
                    meta.put(b"s%d" % i, pack(i, 1, 0))
                self._append(txn, self.items, [(pack(i, 0, 0), item) for i in ids])
        seconds = time.perf_counter() - t0
        stored = self._entries(self.streams)
        if self._entries(self.items) != stored:
            stored = -1
        return Outcome(n_streams, seconds, [], stored=stored, expected=n_streams)

    # engine figures ----------------------------------------------------------------------
    def run_single_commits(self, n_items: int, per_thread: int) -> Outcome:
        """One 1-item durable write transaction at a time (the unbatched durable commit rate)."""
        item, pack = make_item(0), KEY.pack
        t0 = time.perf_counter()
        for i in range(n_items):
            with self.env.begin(write=True, db=self.items) as txn:
                txn.put(pack(IN, 0, i), item, append=True)
        seconds = time.perf_counter() - t0
        return Outcome(n_items, seconds, stored=self._entries(self.items), expected=n_items)

    def run_state_store(self, n_keys: int, batch: int) -> Outcome:
        """The state-store scenario on a raw named DB: ``batch`` puts per (unsynced) write
        transaction, a read transaction per get and per range of 1000 keys, as the engine does."""
        key = b"app/bench\x00key-%010d".__mod__
        db = self.streams
        t0 = time.perf_counter()
        for start in range(0, n_keys, batch):
            with self.env.begin(write=True) as txn:
                for i in range(start, min(start + batch, n_keys)):
                    txn.put(key(i), make_item(i), db=db)
        found = 0
        for i in range(n_keys):
            with self.env.begin() as txn:
                found += txn.get(key(i), db=db) == make_item(i)
        scanned = 0
        for lo in range(0, n_keys, 1000):
            with self.env.begin() as txn:
                cur = txn.cursor(db=db)
                hi = key(lo + 1000)
                if cur.set_range(key(lo)):
                    for k, _ in cur:
                        if k >= hi:
                            break
                        scanned += 1
        seconds = time.perf_counter() - t0
        return Outcome(3 * n_keys, seconds, stored=n_keys + found + scanned, expected=3 * n_keys)

    def setup_scan(self, n_items: int, batch: int, commit_every: int) -> None:
        self._preload(n_items)
        self.env.sync(True)

    def run_scan(self, n_items: int, batch: int, commit_every: int) -> Outcome:
        """Cursor scan of every item; a durable offset write after each ``commit_every`` x ``batch`` items."""
        env, items_db, offsets_db = self.env, self.items, self.offsets
        chunk = commit_every * batch
        nxt, n, last = KEY.pack(IN, 0, 0), 0, b""
        t0 = time.perf_counter()
        while True:
            with env.begin(db=items_db) as txn:
                cur = txn.cursor()
                got = 0
                if cur.set_range(nxt):
                    for k, v in itertools.islice(cur.iternext(), chunk):
                        v  # noqa: B018 - "process" the item
                        last = k
                        got += 1
            if not got:
                break
            n += got
            nxt = KEY.pack(IN, 0, KEY.unpack(last)[2] + 1)
            with env.begin(write=True, db=offsets_db) as w:
                w.put(b"c", last)
        seconds = time.perf_counter() - t0
        return Outcome(n, seconds, stored=n, expected=n_items)


class RawLmdbNoSync(RawLmdb):
    """The same without any fsync (``sync=False``, ``metasync=False``)."""

    name = "lmdb-raw-nosync"
    label = "raw py-lmdb (no sync)"
    description = "py-lmdb, sync=False, named DBs, key per item, putmulti(append=True)"
    sync = False

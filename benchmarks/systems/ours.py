"""This project, through its public API: embedded (``ts.open``) and over ZeroMQ (``ts.connect``).

Durable settings: ``durability="sync"`` (every acknowledged write is fsynced). Producers use
``producer.instant(items)`` (open + data + checkpoint as one atomic write); consumers commit
their offsets with ``consumer.checkpoint()``; exactly-once uses ``ts.CheckpointGroup``.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.systems.base import Outcome, System, items_range, make_item, run_threads, transform


class OursEmbedded(System):
    name = "ours-embedded"
    label = "tstreams-embedded (in-process)"
    description = "ts.open(dir, durability='sync'); producer.instant, consumer.checkpoint, CheckpointGroup"
    is_ours = True
    durability = "sync"

    def open(self) -> None:
        import tstreams_embedded as ts

        self.ts = ts
        self.engine = ts.open(str(self.workdir / "data"), durability=self.durability)

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            self.engine = None
            engine.close()

    @classmethod
    def available(cls) -> str | None:
        try:
            import tstreams_embedded as ts
        except ImportError as e:
            return f"tstreams_embedded cannot be imported: {e}"
        return None if hasattr(ts, "open") else "tstreams_embedded has no ts.open"

    # helpers ---------------------------------------------------------------------------
    def client_for_thread(self):
        """The engine handle a concurrent writer thread uses (embedded: the shared engine)."""
        return self.engine

    def close_thread_clients(self) -> None:
        pass

    def _count_items(self, stream: str, partition: int = 0) -> tuple[int, int]:
        """(items, last txn id) of every checkpointed transaction, read back through the backend."""
        from tstreams_embedded.engine.protocol.iteration import iter_transactions

        walk = iter_transactions(self.engine.backend, stream, partition)
        n = sum(len(t.items) for t in walk)
        return n, walk.position

    def _preload(self, stream: str, n_items: int, batch: int) -> None:
        producer = self.engine.producer(stream, partition=0)
        for start in range(0, n_items, batch):
            producer.instant(items_range(start, min(batch, n_items - start)), partition=0)

    # 1 ---------------------------------------------------------------------------------
    def run_produce(self, n_items: int, batch: int) -> Outcome:
        self.engine.create_stream("s", partitions=1)
        producer = self.engine.producer("s", partition=0)
        items = items_range(0, batch)
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        for _ in range(n_items // batch):
            s = clock()
            producer.instant(items, partition=0)
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        return Outcome(n_items, seconds, lat, stored=self._count_items("s")[0], expected=n_items)

    # 2 ---------------------------------------------------------------------------------
    def run_concurrent(self, threads: int, per_thread: int) -> Outcome:
        self.engine.create_stream("s", partitions=1)
        item = [make_item(0)]

        def factory(t: int):
            producer = self.client_for_thread().producer("s", partition=0)
            return lambda i: producer.instant(item, partition=0)

        try:
            seconds, lat = run_threads(threads, per_thread, factory)
        finally:
            self.close_thread_clients()
        n = threads * per_thread
        return Outcome(n, seconds, lat, stored=self._count_items("s")[0], expected=n)

    # 3 ---------------------------------------------------------------------------------
    def setup_consume(self, n_items: int, batch: int) -> None:
        self.engine.create_stream("in", partitions=1)
        self._preload("in", n_items, batch)

    def run_consume(self, n_items: int, batch: int) -> Outcome:
        consumer = self.engine.consumer("in", name="c", start="oldest")
        n = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while True:
            s = clock()
            txn = consumer.get_transaction(0)
            if txn is None:
                break
            for item in txn.items:
                item  # noqa: B018 - "process" the item
            n += len(txn.items)
            consumer.checkpoint()  # one transaction = `batch` items: a durable offset commit
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        _, last = self._count_items("in")
        ok = self.engine.backend.get_offsets("in", "c").get(0) == last
        return Outcome(n, seconds, lat, stored=n if ok else -1, expected=n_items)

    # 4 ---------------------------------------------------------------------------------
    def setup_exactly_once(self, n_items: int, batch: int) -> None:
        self.engine.create_stream("in", partitions=1)
        self.engine.create_stream("out", partitions=1)
        self._preload("in", n_items, batch)

    def run_exactly_once(self, n_items: int, batch: int) -> Outcome:
        ts = self.ts
        consumer = self.engine.consumer("in", name="c", start="oldest")
        producer = self.engine.producer("out", partition=0)
        n = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while True:
            s = clock()
            txn = consumer.get_transaction(0)
            if txn is None:
                break
            out = producer.new_transaction(partition=0)
            out.send_many([transform(x) for x in txn.items])
            ts.CheckpointGroup(producer, consumer).checkpoint()  # outputs + offset, one atomic write
            n += len(txn.items)
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        _, last = self._count_items("in")
        stored = self._count_items("out")[0]
        if self.engine.backend.get_offsets("in", "c").get(0) != last:
            stored = -1
        return Outcome(n, seconds, lat, stored=stored, expected=n_items)

    # 5 ---------------------------------------------------------------------------------
    def run_many_streams(self, n_streams: int, batch: int, **_: Any) -> Outcome:
        item = [make_item(0)]
        t0 = time.perf_counter()
        for start in range(0, n_streams, batch):
            with self.engine.batch() as b:  # `batch` streams + their transactions in one durable write
                for i in range(start, min(n_streams, start + batch)):
                    b.create_stream(f"s{i}", partitions=1)
                    b.instant(f"s{i}", item, partition=0)
        seconds = time.perf_counter() - t0
        stored = len(self.engine.list_streams(prefix="s"))
        return Outcome(n_streams, seconds, [], stored=stored, expected=n_streams)


    # engine figures ----------------------------------------------------------------------
    def run_produce_txn(self, n_items: int, batch: int) -> Outcome:
        """``new_transaction(); send(item) x batch; checkpoint()`` per transaction."""
        self.engine.create_stream("s", partitions=1)
        producer = self.engine.producer("s", partition=0)
        items = items_range(0, batch)
        t0 = time.perf_counter()
        for _ in range(n_items // batch):
            txn = producer.new_transaction(partition=0)
            for item in items:
                txn.send(item)
            txn.checkpoint()
        seconds = time.perf_counter() - t0
        return Outcome(n_items, seconds, stored=self._count_items("s")[0], expected=n_items)

    def setup_scan(self, n_items: int, batch: int, commit_every: int) -> None:
        """Pre-load the backlog with async durability (set-up speed), then reopen as configured."""
        self.engine.close()
        with self.ts.open(str(self.workdir / "data"), durability="async") as engine:
            engine.create_stream("in", partitions=1)
            producer = engine.producer("in", partition=0)
            for start in range(0, n_items, batch):
                producer.instant(items_range(start, min(batch, n_items - start)), partition=0)
        self.engine = self.ts.open(str(self.workdir / "data"), durability=self.durability)

    def run_scan(self, n_items: int, batch: int, commit_every: int) -> Outcome:
        """A consumer reading every transaction, ``checkpoint()`` after every ``commit_every`` transactions."""
        consumer = self.engine.consumer("in", name="c", start="oldest")
        n = txns = 0
        t0 = time.perf_counter()
        while True:
            txn = consumer.get_transaction(0)
            if txn is None:
                break
            for item in txn.items:
                item  # noqa: B018 - "process" the item
            n += len(txn.items)
            txns += 1
            if txns % commit_every == 0:
                consumer.checkpoint()
        consumer.checkpoint()
        seconds = time.perf_counter() - t0
        _, last = self._count_items("in")
        ok = self.engine.backend.get_offsets("in", "c").get(0) == last
        return Outcome(n, seconds, stored=n if ok else -1, expected=n_items)

    def run_state_store(self, n_keys: int, batch: int) -> Outcome:
        """A state store through the backend: ``n_keys`` 100-byte values written ``batch``
        per (non-durable) ``StoreWrite``, each read back by ``store_get``, then the whole
        store read by ``store_range`` in ranges of 1000 keys. Items: writes + gets + entries scanned."""
        from tstreams_embedded.engine.protocol import ops as O

        backend = self.engine.backend
        key = b"key-%010d".__mod__
        t0 = time.perf_counter()
        written = 0
        for start in range(0, n_keys, batch):
            puts = [[key(i), make_item(i)] for i in range(start, min(start + batch, n_keys))]
            backend.submit([O.StoreWrite("app/bench", puts)], durable=False)
            written += len(puts)
        found = sum(backend.store_get("app/bench", key(i)) == make_item(i) for i in range(n_keys))
        scanned = sum(len(backend.store_range("app/bench", key(lo), key(lo + 1000), limit=1000))
                      for lo in range(0, n_keys, 1000))
        seconds = time.perf_counter() - t0
        return Outcome(3 * n_keys, seconds, stored=written + found + scanned, expected=3 * n_keys)

    def run_group_commit(self, n_items: int, per_thread: int, threads: int) -> Outcome:
        """``threads`` threads, each calling ``producer.instant([item])`` in a loop; commits and fsyncs counted."""
        before = self.engine.backend.stats()
        outcome = self.run_concurrent(threads, per_thread)
        after = self.engine.backend.stats()
        delta = {k: after[k] - before[k] for k in ("fsyncs", "commits", "batches") if k in after and k in before}
        outcome.extra.update(delta)
        if delta.get("commits"):  # group commit: writes per LMDB transaction and per fsync
            outcome.extra["writes_per_commit"] = delta["batches"] / delta["commits"]
        if delta.get("fsyncs"):
            outcome.extra["writes_per_fsync"] = delta["batches"] / delta["fsyncs"]
        return outcome

    def run_single_commits(self, n_items: int, per_thread: int) -> Outcome:
        """One thread of durable 1-item instant transactions."""
        return self.run_group_commit(n_items, n_items, 1)

    def run_streams_api(self, n_streams: int, batch: int, api_streams: int) -> Outcome:
        """The public API one stream at a time: ``create_stream`` + ``producer(...).instant``."""
        item = [make_item(0)]
        t0 = time.perf_counter()
        for i in range(api_streams):
            name = f"s{i}"
            self.engine.create_stream(name, partitions=1)
            self.engine.producer(name, partition=0).instant(item, partition=0)
        seconds = time.perf_counter() - t0
        stored = len(self.engine.list_streams(prefix="s"))
        return Outcome(api_streams, seconds, stored=stored, expected=api_streams)


class OursEmbeddedAsync(OursEmbedded):
    """Embedded with ``durability="async"`` (acknowledged before the fsync)."""

    name = "ours-embedded-async"
    label = "tstreams-embedded (in-process, async durability)"
    description = "ts.open(dir, durability='async')"
    durability = "async"


class OursEmbeddedUnsealed(OursEmbedded):
    """Embedded, reading chunks stored without their checksum (the format of directories
    created before chunk checksums): measures what verifying the checksum costs on consume."""

    name = "ours-embedded-unsealed"
    label = "tstreams-embedded (in-process, chunks without checksum)"
    description = "ts.open(dir, durability='sync') on a backlog whose chunks are stored unsealed"

    def setup_scan(self, n_items: int, batch: int, commit_every: int) -> None:
        """The same pre-load, through the same write path, storing chunks unsealed."""
        import lmdb

        from tstreams_embedded.engine.storage import apply_base, directory, seals

        sealing = apply_base.seal
        apply_base.seal = lambda payload: payload  # this worker process only
        try:
            super().setup_scan(n_items, batch, commit_every)
        finally:
            apply_base.seal = sealing
        self.engine.close()
        env = lmdb.open(str(self.workdir / "data"), max_dbs=16)
        with env.begin(write=True) as txn:  # unsealed chunks are legacy data in such a directory
            txn.put(directory.LEGACY_CHUNKS_KEY, seals.seal(directory.LEGACY_CHUNKS_KEY, b""),
                    db=env.open_db(b"meta", txn=txn))
        env.close()
        self.engine = self.ts.open(str(self.workdir / "data"), durability=self.durability)
        assert self.engine.backend.store.legacy_chunks


def switch_off_value_seals() -> None:
    """In this process only, store and read every value but the chunks without its seal
    (the baseline of the value-seal cost; directories written so are not for keeping)."""
    from tstreams_embedded.engine.storage import seals, store

    if getattr(store.Store, "values_unsealed", False):
        return
    seals.seal = lambda key, payload: payload
    seals.unseal = seals.unsealed
    opening = store.Store.__init__

    def unsealed_store(self: store.Store, *args: Any, **kwargs: Any) -> None:
        opening(self, *args, **kwargs)
        self.sealed = False  # the reads that inline the verification test this
        self.unseal = seals.unsealed

    store.Store.__init__ = unsealed_store  # type: ignore[method-assign]
    store.Store.values_unsealed = True  # type: ignore[attr-defined]


class OursEmbeddedValuesUnsealed(OursEmbedded):
    """Embedded, storing and reading every value but the chunks without its seal (the
    checksum over key and value of :mod:`tstreams_embedded.engine.storage.seals`): measures what
    sealing and verifying values costs on the consume and state-store paths. Chunks keep
    their own checksum, as in ``ours-embedded``."""

    name = "ours-embedded-values-unsealed"
    label = "tstreams-embedded (in-process, values without checksum)"
    description = "ts.open(dir, durability='sync') with value seals switched off in the worker process"

    def open(self) -> None:
        switch_off_value_seals()
        super().open()
        assert not self.engine.backend.store.sealed


class OursZmq(OursEmbedded):
    """The same code against ``tstreams serve`` over ZeroMQ on 127.0.0.1."""

    name = "ours-zmq"
    label = "tstreams-embedded over ZeroMQ"
    description = "tstreams serve (sync) + ts.connect(endpoint); same API calls as embedded"

    def open(self) -> None:
        import tstreams_embedded as ts
        from tstreams_embedded.testing import ServeProcess

        self.ts = ts
        self._thread_clients: list = []
        last_err: Exception | None = None
        for _attempt in range(3):  # a free port can be taken between probing and binding
            self.proc = ServeProcess(self.workdir / "data", self.workdir, durability="sync")
            try:
                self.proc.start(30)
            except RuntimeError as e:
                last_err = e
                continue
            self.endpoint = self.proc.endpoint
            self.engine = ts.connect(self.endpoint)
            return
        raise RuntimeError(f"tstreams serve did not start: {last_err}")

    def client_for_thread(self):
        """One connection per writer thread, like one Redis connection per thread."""
        client = self.ts.connect(self.endpoint)
        self._thread_clients.append(client)
        return client

    def close_thread_clients(self) -> None:
        clients, self._thread_clients = self._thread_clients, []
        for c in clients:
            c.close()

    def _stop_server(self) -> None:
        proc = getattr(self, "proc", None)
        self.proc = None
        if proc is not None:
            proc.stop(15)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._stop_server()

    def server_pids(self) -> list[int]:
        proc = getattr(self, "proc", None)
        return [proc.pid] if proc is not None else []

    @classmethod
    def available(cls) -> str | None:
        reason = OursEmbedded.available()
        if reason:
            return reason
        try:
            from tstreams_embedded.net import connect  # noqa: F401
            from tstreams_embedded.net.cli import serve  # noqa: F401
        except ImportError as e:
            return f"the network layer cannot be imported: {e}"
        return None

"""Redis Streams via redis-py, against a private ``redis-server`` with AOF.

Best practice as documented by Redis: a producer transaction is ``MULTI; XADD x N; EXEC``
(one round trip with a pipeline); a consumer reads ``XREAD COUNT 100`` and keeps its offset
(the last entry ID) in a key; exactly-once wraps the output XADDs and the offset SET in one
MULTI/EXEC. Round trips are minimised by pipelining (the offset SET travels with the next
XREAD; the next XREAD travels inside the MULTI/EXEC).
"""

from __future__ import annotations

import shutil
import time

from benchmarks.redis_server import RedisServer
from benchmarks.systems.base import Outcome, System, items_range, make_item, run_threads, transform

FIELD = b"d"
OFFSET_KEY = "offset:c"


class _RedisStreams(System):
    appendfsync = "everysec"

    def open(self) -> None:
        import redis

        self.server = RedisServer(self.workdir / "redis", appendfsync=self.appendfsync).start()
        self.port = self.server.port
        self.client = redis.Redis(host="127.0.0.1", port=self.port)

    def new_client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port)

    def close(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            try:
                self.client.close()
            finally:
                server.stop()

    def server_pids(self) -> list[int]:
        pid = self.server.pid if getattr(self, "server", None) else None
        return [pid] if pid else []

    def disk_bytes(self) -> int:
        return self.server.aof_bytes()

    @classmethod
    def available(cls) -> str | None:
        if shutil.which("redis-server") is None:
            return "redis-server is not installed"
        try:
            import redis  # noqa: F401
        except ImportError:
            return "redis-py is not installed"
        return None

    # helpers ---------------------------------------------------------------------------
    def _preload(self, key: str, n_items: int) -> None:
        pipe = self.client.pipeline(transaction=False)
        for i in range(n_items):
            pipe.xadd(key, {FIELD: make_item(i)})
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()

    def _last_id(self, key: str) -> bytes | None:
        last = self.client.xrevrange(key, count=1)
        return last[0][0] if last else None

    # 1. produce in transactions of `batch` items ---------------------------------------
    def run_produce(self, n_items: int, batch: int) -> Outcome:
        items = items_range(0, batch)
        pipe = self.client.pipeline(transaction=True)  # MULTI ... EXEC
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        for _ in range(n_items // batch):
            s = clock()
            for item in items:
                pipe.xadd("s", {FIELD: item})
            pipe.execute()
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        return Outcome(n_items, seconds, lat, stored=self.client.xlen("s"), expected=n_items)

    # 2. 1-item transactions from concurrent clients -------------------------------------
    def run_concurrent(self, threads: int, per_thread: int) -> Outcome:
        item = make_item(0)
        clients = []

        def factory(t: int):
            c = self.new_client()
            c.ping()
            clients.append(c)
            return lambda i: c.xadd("s", {FIELD: item})  # one command is one atomic transaction

        seconds, lat = run_threads(threads, per_thread, factory)
        for c in clients:
            c.close()
        n = threads * per_thread
        return Outcome(n, seconds, lat, stored=self.client.xlen("s"), expected=n)

    # 3. consume, committing the offset every `batch` items -----------------------------
    def setup_consume(self, n_items: int, batch: int) -> None:
        self._preload("in", n_items)

    def run_consume(self, n_items: int, batch: int) -> Outcome:
        pipe = self.client.pipeline(transaction=False)
        last = b"0-0"
        n = 0
        lat = []
        clock = time.perf_counter_ns
        t0 = time.perf_counter()
        while True:
            s = clock()
            if n:
                pipe.set(OFFSET_KEY, last)  # commit the previous batch's offset with the next read
            pipe.xread({"in": last}, count=batch)
            res = pipe.execute()[-1]
            if not res:
                break
            msgs = res[0][1]
            for _id, fields in msgs:
                fields[FIELD]  # noqa: B018 - "process" the item
            n += len(msgs)
            last = msgs[-1][0]
            lat.append(clock() - s)
        self.client.set(OFFSET_KEY, last)
        seconds = time.perf_counter() - t0
        ok = self.client.get(OFFSET_KEY) == self._last_id("in")
        return Outcome(n, seconds, lat, stored=n if ok else -1, expected=n_items)

    # 4. exactly-once read-transform-write --------------------------------------------
    def setup_exactly_once(self, n_items: int, batch: int) -> None:
        self._preload("in", n_items)

    def run_exactly_once(self, n_items: int, batch: int) -> Outcome:
        lat = []
        clock = time.perf_counter_ns
        n = 0
        t0 = time.perf_counter()
        res = self.client.xread({"in": b"0-0"}, count=batch)
        msgs = res[0][1] if res else []
        while msgs:
            s = clock()
            pipe = self.client.pipeline(transaction=True)  # MULTI: outputs + offset, atomically
            for _id, fields in msgs:
                pipe.xadd("out", {FIELD: transform(fields[FIELD])})
            last = msgs[-1][0]
            pipe.set(OFFSET_KEY, last)
            pipe.xread({"in": last}, count=batch)  # the next batch rides in the same round trip
            res = pipe.execute()[-1]
            n += len(msgs)
            msgs = res[0][1] if res else []
            lat.append(clock() - s)
        seconds = time.perf_counter() - t0
        stored = self.client.xlen("out")
        if self.client.get(OFFSET_KEY) != self._last_id("in"):
            stored = -1
        return Outcome(n, seconds, lat, stored=stored, expected=n_items)

    # 5. many streams with one transaction each -----------------------------------------
    def run_many_streams(self, n_streams: int, batch: int) -> Outcome:
        item = make_item(0)
        before = self.client.info("memory")["used_memory"]
        pipe = self.client.pipeline(transaction=False)
        t0 = time.perf_counter()
        for i in range(n_streams):
            pipe.xadd(f"s{i}", {FIELD: item})
            if i % batch == batch - 1:
                pipe.execute()
        pipe.execute()
        seconds = time.perf_counter() - t0
        used = self.client.info("memory")["used_memory"] - before
        return Outcome(
            n_streams, seconds, [], stored=self.client.dbsize(), expected=n_streams,
            extra={"redis_used_memory_per_stream": used / n_streams},
        )


class RedisEverysec(_RedisStreams):
    name = "redis-everysec"
    label = "Redis Streams (AOF everysec)"
    description = "redis-server, appendonly yes, appendfsync everysec; redis-py, MULTI/EXEC pipelines"
    appendfsync = "everysec"


class RedisAlways(_RedisStreams):
    name = "redis-always"
    label = "Redis Streams (AOF always)"
    description = "redis-server, appendonly yes, appendfsync always; redis-py, MULTI/EXEC pipelines"
    appendfsync = "always"

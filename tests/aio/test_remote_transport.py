"""The asyncio API over ``tcp://`` (its ``zmq.asyncio`` transport, ``aio/connection.py``)
against real ``tstreams serve`` processes: CURVE keys, the server's size limits checked
before sending, paged read replies, ``ServerBusy`` retries, a server restart under a
waiting consumer."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tstreams_embedded import aio, errors
from tstreams_embedded.net.auth import load_client_curve
from tstreams_embedded.net.client import RemoteBackend
from tstreams_embedded.testing import ServeProcess
from tstreams_embedded.testing.server_process import child_environment


def _keys(directory: Path, *clients: str) -> None:
    args = [sys.executable, "-m", "tstreams_embedded.net.cli", "keys", "generate", str(directory)]
    for c in clients:
        args += ["--client", c]
    subprocess.run(args, check=True, env=child_environment(), capture_output=True, timeout=60)


def test_curve_authorized_client_is_served_and_an_unknown_one_is_not(tmp_path: Path) -> None:
    keys, other = tmp_path / "keys", tmp_path / "other-keys"
    _keys(keys, "alice")
    _keys(other, "mallory")
    data = tmp_path / "data"
    data.mkdir()
    with ServeProcess(data, tmp_path, extra_args=["--curve-dir", str(keys)]) as server:
        async def main() -> None:
            async with await aio.connect(server.endpoint, timeout=10, curve_dir=keys, curve_client="alice") as alice:
                await alice.create_stream("secret")
                producer = await alice.producer("secret")
                await producer.instant([b"classified"])
                consumer = await alice.consumer("secret", "c")
                got = await consumer.next(timeout=5)
                assert got is not None and got.items == [b"classified"]
            server_pub, _, _ = load_client_curve(keys, "alice")
            _, m_pub, m_sec = load_client_curve(other, "mallory")
            async with await aio.connect(server.endpoint, timeout=1.5, server_public_key=server_pub,
                                         client_public_key=m_pub, client_secret_key=m_sec) as mallory:
                with pytest.raises(errors.RemoteError, match="not connected.*authentication refused"):
                    await mallory.list_streams()

        asyncio.run(main())


def test_large_transactions_are_read_in_pages_and_too_large_requests_are_refused_unsent(tmp_path: Path) -> None:
    """Read replies capped at 1 KiB: transactions of 8 KiB arrive whole (the pages joined);
    a request over the server's limit raises RequestTooLarge and writes nothing."""
    data = tmp_path / "data"
    data.mkdir()
    limits = ["--max-reply-bytes", "1024", "--max-request-size", "65536"]
    with ServeProcess(data, tmp_path, extra_args=limits) as server:
        async def main() -> None:
            async with await aio.connect(server.endpoint, timeout=20) as engine:
                await engine.create_stream("s")
                producer = await engine.producer("s")
                items = [b"%03d" % i + b"x" * 97 for i in range(80)]
                for _ in range(3):
                    async with producer.transaction() as txn:
                        await txn.send_many(items)
                with pytest.raises(errors.RequestTooLarge, match="not sent"):
                    await producer.instant([b"y" * 40_000, b"z" * 40_000])
                consumer = await engine.consumer("s", "c")
                got = [await consumer.next(timeout=5) for _ in range(3)]
                assert [t.items if t else None for t in got] == [items] * 3
                assert await consumer.next(timeout=0) is None  # nothing of the refused request

        asyncio.run(main())


def test_a_waiting_consumer_survives_a_server_restart(tmp_path: Path) -> None:
    """The commit watch is a long-lived request marked safe to retry: after the server is
    killed and restarted it is sent again, and the consumer is woken by the next commit."""
    data = tmp_path / "data"
    data.mkdir()
    with ServeProcess(data, tmp_path) as server:
        async def main() -> None:
            async with await aio.connect(server.endpoint, timeout=20) as engine:
                await engine.create_stream("s")
                consumer = await engine.consumer("s", "c")
                assert await consumer.next(timeout=0) is None
                waiting = asyncio.ensure_future(consumer.next(timeout=30))
                server.kill()
                await asyncio.to_thread(server.restart)
                producer = await engine.producer("s")
                await producer.instant([b"after the restart"])
                got = await asyncio.wait_for(waiting, 30)
                assert got is not None and got.items == [b"after the restart"]

        asyncio.run(main())


def test_writes_refused_server_busy_are_sent_again_until_applied(tmp_path: Path) -> None:
    """A server with a 4 MiB budget for all requests in flight, 16 coroutines writing 1 MiB
    each at once: the requests over the budget are answered ServerBusy (not executed) and
    the client sends them again after a back-off (awaited on the loop) until each is applied
    once."""
    data = tmp_path / "data"
    data.mkdir()
    budget = ["--max-server-bytes", str(4 << 20), "--max-request-size", str(2 << 20)]
    with ServeProcess(data, tmp_path, extra_args=budget) as server:
        async def main() -> None:
            async with await aio.connect(server.endpoint, timeout=30) as engine:
                await engine.create_stream("s")
                producer = await engine.producer("s")
                items = [bytes([i]) * ((1 << 20) - 4096) for i in range(16)]
                ids = await asyncio.gather(*(producer.instant([item]) for item in items))
                assert len(set(ids)) == 16
                backend = engine.sync.backend
                assert isinstance(backend, RemoteBackend)
                stats = await engine.runner.read(backend.server_stats)
                assert stats["busy"] > 0, stats  # (else this test proves nothing)
                consumer = await engine.consumer("s", "c")
                got = [await consumer.next(timeout=10) for _ in items]
                assert sorted(t.items[0][0] for t in got if t) == list(range(16))
                assert await consumer.next(timeout=0) is None  # each applied once

        asyncio.run(main())

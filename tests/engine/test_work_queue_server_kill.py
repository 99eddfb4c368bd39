"""A work queue over the network while its server is SIGKILLed mid-settle: a remote
consumer writes its output and its acknowledgements in one CheckpointGroup write; the
``tstreams serve`` process is killed three times while the consumer works (each time
after progress) and restarted on the same data. Every item reaches the output exactly
once, and the group ends with nothing in flight. Alike with acks riding on the next
receive (at least once: the output is written before the acks)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import tstreams_embedded as ts
from tstreams_embedded import errors
from tstreams_embedded.testing import ServeProcess, eventually


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["group", "riding"])
def test_exactly_once_output_across_sigkills_of_the_server_mid_settle(tmp_path: Path, mode: str) -> None:
    """``mode`` "group": output and acks in one CheckpointGroup write (exactly once);
    "riding": output written, then its acks staged to ride on the next
    ``receive(commit_staged=True)`` (every item completes, at least once)."""
    items = [b"%04d" % i for i in range(400)]
    with ServeProcess(tmp_path / "data", tmp_path / "serve") as server:
        engine = server.connect(timeout=30)
        try:
            engine.create_stream("in", partitions=2)
            engine.create_stream("out")
            p = engine.producer("in")
            for start in range(0, len(items), 10):
                p.instant(items[start:start + 10], partition=start // 10 % 2)
            q = engine.work_queue("in", "g", ack_timeout=1, max_deliveries=1_000, consumer="w")
            out = engine.producer("out")
            group = ts.CheckpointGroup(out, q)
            done = threading.Event()
            written = [0]
            failures: list[BaseException] = []

            def work() -> None:
                try:
                    while not done.is_set():
                        try:
                            got = q.receive(max_items=7, timeout=0.2, commit_staged=mode == "riding")
                            if not got:
                                continue
                            if mode == "riding":
                                out.instant([d.item for d in got])
                                for d in got:
                                    d.ack(commit=False)  # written with the next receive
                                written[0] += len(got)
                                continue
                            txn = out.new_transaction()
                            for d in got:
                                txn.send(d.item)
                                d.ack(commit=False)
                            group.checkpoint()
                            written[0] += len(got)
                        except errors.DeliveryExpired:
                            continue  # taken over, or our write was applied and its reply lost
                        except errors.TStreamsError:
                            continue  # the server is down: its locks run out, the items come back
                except BaseException as e:  # noqa: BLE001 - reported by the test
                    failures.append(e)

            worker = threading.Thread(target=work)
            worker.start()
            try:
                for _ in range(3):
                    before = written[0]
                    eventually(lambda b=before: written[0] > b, timeout=60, interval=0.002)
                    server.kill()
                    server.start()

                def all_acked() -> bool:
                    return q.status().counters["acked"] >= len(items)

                eventually(all_acked, timeout=120, ignore=(errors.TStreamsError,))
            finally:
                done.set()
                worker.join(timeout=60)
            assert not failures, failures
            reader = engine.consumer("out", "check")
            got: list[bytes] = []
            while (t := reader.get_transaction()) is not None:
                got.extend(t.items)
            if mode == "group":
                assert sorted(got) == items, "an item is missing from the output or was written twice"
            else:
                assert set(got) == set(items), "an item is missing from the output"
            status = q.status(full=True)
            assert (status.in_flight, status.waiting, status.counters["acked"]) == (0, 0, len(items))
        finally:
            engine.close()

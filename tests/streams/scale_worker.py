"""One instance of the scale-out test's application, in a real subprocess:
``scale_worker.py DATA|tcp://HOST:PORT`` (an engine directory, or a ``tstreams serve``).
It joins the group of application ``scale`` (the kill test's
pipeline, 1 s leases), runs its share of the tasks until it is killed, and serves queries
and metrics on a free port (printed as ``started PORT``)."""

from __future__ import annotations

import sys
from pathlib import Path

import tstreams_embedded as ts
from tstreams_embedded.streams import App

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kill_worker import topology  # noqa: E402


def main() -> None:
    target = sys.argv[1]
    with (ts.connect(target) if target.startswith("tcp://") else ts.open(target, compaction_interval=None)) as engine:
        app = App(engine, application_id="scale", topology=topology(),  # type: ignore[arg-type]
                  commit_records=15, commit_interval_ms=5, lease_ms=1000, http_port=0)
        app.start()
        address = app.http_address
        assert address is not None
        print("started", address[1], flush=True)
        sys.stdin.read()  # runs until killed (or stdin closes)
        app.close()


if __name__ == "__main__":
    main()

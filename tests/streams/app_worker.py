"""The ``main()`` of the kill tests' app processes (``*_worker.py DATA run|finish``).

``run`` starts the app, prints ``started`` and processes until the process is killed
(stdin stays open; its end stops the app); ``finish`` processes until idle, prints ``done``
and exits.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import tstreams_embedded as ts
from tstreams_embedded.streams import App


def run_worker(make_app: Callable[[Any], App]) -> None:
    """Open ``sys.argv[1]``, build the app with ``make_app(engine)`` and run it in the mode
    ``sys.argv[2]`` names."""
    data, mode = sys.argv[1], sys.argv[2]
    with ts.open(data, compaction_interval=None) as engine:
        app = make_app(engine)
        if mode == "finish":
            app.run(until_idle=True)
            print("done", flush=True)
            return
        app.start()
        print("started", flush=True)
        sys.stdin.read()  # runs until killed, or until the test closes stdin
        app.stop()

"""The ``streams`` suite: a windowed count job run by every stream processor side by side.

:mod:`benchmarks.streams.events` holds the job's input generator, its plain-Python reference
and the exact check; :mod:`benchmarks.streams.jobs` one program per system, each run in its
own process (so its peak RSS is its own) by :mod:`benchmarks.systems.stream_jobs`. Nothing
here imports the project or a third-party package at import time: the Pathway job runs in
its own interpreter (see ``benchmarks/README.md``).
"""

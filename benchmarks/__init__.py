"""Benchmarks: tstreams-embedded measured side by side with its peers.

* ``python -m benchmarks [--quick]`` runs the peer scoreboard (Redis Streams, SQLite WAL,
  raw py-lmdb, this project embedded and over ZeroMQ) and writes
  ``benchmarks/results/peers.{json,md}`` plus one PNG per scenario.
* ``python -m benchmarks.engine [--quick]`` measures the engine's own figures against raw
  py-lmdb and writes ``benchmarks/results/engine.{json,md}``.

Speed is measured only here, never in tests. Every figure is taken side by side with its
baseline in the same run, repeated (interleaved) and reported as medians with spread.
"""

"""Benchmarks: tstreams-embedded measured side by side with its baselines.

``python -m benchmarks [--suite peers|engine|net|spark] [--quick]`` runs one suite (see
:mod:`benchmarks.scenarios`) with the one harness in :mod:`benchmarks.harness` and writes
``benchmarks/results/<suite>.{json,md}`` plus charts (:mod:`benchmarks.report`).

Speed is measured only here, never in tests. Every figure is taken side by side with its
baseline in the same run, repeated (interleaved) and reported as medians with spread.
"""

"""The systems under test, by name. Modules are imported lazily (a worker imports only its own)."""

from __future__ import annotations

import importlib

from benchmarks.systems.base import System

REGISTRY: dict[str, str] = {
    # peers
    "ours-embedded": "benchmarks.systems.ours:OursEmbedded",
    "ours-zmq": "benchmarks.systems.ours:OursZmq",
    "redis-everysec": "benchmarks.systems.redis_streams:RedisEverysec",
    "redis-always": "benchmarks.systems.redis_streams:RedisAlways",
    "sqlite-wal-full": "benchmarks.systems.sqlite_queue:SqliteWalFull",
    "lmdb-raw": "benchmarks.systems.raw_lmdb:RawLmdb",
    # engine
    "ours-embedded-async": "benchmarks.systems.ours:OursEmbeddedAsync",
    "ours-embedded-unsealed": "benchmarks.systems.ours:OursEmbeddedUnsealed",
    "ours-embedded-values-unsealed": "benchmarks.systems.ours:OursEmbeddedValuesUnsealed",
    "ours-streams-values-unsealed": "benchmarks.systems.stream_jobs:OursStreamsValuesUnsealed",
    "lmdb-raw-nosync": "benchmarks.systems.raw_lmdb:RawLmdbNoSync",
    "fsync-floor": "benchmarks.systems.fsync_floor:FsyncFloor",
    "fsync-floor-2": "benchmarks.systems.fsync_floor:FsyncFloor2",
    "fsync-floor-3": "benchmarks.systems.fsync_floor:FsyncFloor3",
    # net
    "echo-server": "benchmarks.systems.net_servers:EchoServer",
    "moebius-server": "benchmarks.systems.net_servers:MoebiusServer",
    "ours-serve": "benchmarks.systems.net_servers:OursServe",
    "ours-serve-sync": "benchmarks.systems.net_servers:OursServeSync",
    "ours-serve-before": "benchmarks.systems.net_servers:OursServeBefore",
    "ours-haproxy": "benchmarks.systems.net_servers:OursHAProxy",
    # cluster
    "ours-cluster": "benchmarks.systems.cluster:OursCluster",
    "ours-serve-node": "benchmarks.systems.cluster:OursServeNode",
    "redis-replicated": "benchmarks.systems.cluster:RedisReplicated",
    "redis-replicated-always": "benchmarks.systems.cluster:RedisReplicatedAlways",
    # spark
    "spark-tstreams": "benchmarks.systems.spark_sources:SparkTstreams",
    "spark-parquet": "benchmarks.systems.spark_sources:SparkParquet",
    "spark-python-floor": "benchmarks.systems.spark_sources:SparkPythonFloor",
    "spark-files": "benchmarks.systems.spark_sources:SparkFiles",
    # streams (each job in its own child process)
    "ours-streams": "benchmarks.systems.stream_jobs:OursStreams",
    "ours-streams-serve": "benchmarks.systems.stream_remote:OursStreamsServe",
    "ours-streams-cluster": "benchmarks.systems.stream_remote:OursStreamsCluster",
    "python-floor": "benchmarks.systems.stream_jobs:PythonFloor",
    "python-floor-orjson": "benchmarks.systems.stream_jobs:PythonFloorOrjson",
    "bytewax": "benchmarks.systems.stream_jobs:Bytewax",
    "pathway": "benchmarks.systems.stream_jobs:Pathway",
    # aio (issue 22)
    "ours-aio": "benchmarks.systems.aio:OursAio",
    "ours-aio-zmq": "benchmarks.systems.aio:OursAioZmq",
    "ours-sync-embedded": "benchmarks.systems.aio:OursSyncEmbedded",
    "ours-sync-zmq": "benchmarks.systems.aio:OursSyncZmq",
    # work queues (issue 22)
    "ours-queue": "benchmarks.systems.work_queues:OursQueue",
    "redis-queue-always": "benchmarks.systems.work_queues:RedisQueueAlways",
    "redis-queue-everysec": "benchmarks.systems.work_queues:RedisQueueEverysec",
    "sqlite-queue": "benchmarks.systems.work_queues:SqliteQueue",
    # cluster catch-up
    "cluster-catchup": "benchmarks.systems.cluster_catchup:ClusterCatchup",
    "ours-streams-join": "benchmarks.systems.stream_join_jobs:OursStreamsJoin",
    "ours-streams-sliding": "benchmarks.systems.stream_sliding:OursSliding",
    # scheduled delivery (issue 22)
    "ours-schedules": "benchmarks.systems.schedules:OursSchedules",
    "bytewax-join": "benchmarks.systems.stream_join_jobs:BytewaxJoin",
}
OURS = ("ours-embedded", "ours-zmq")
PEERS = ("redis-everysec", "redis-always", "sqlite-wal-full", "lmdb-raw")


def system_class(name: str) -> type[System]:
    """The class registered under ``name`` (KeyError if unknown)."""
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)

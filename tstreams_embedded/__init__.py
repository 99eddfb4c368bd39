"""tstreams-embedded: transactional, persistent, partitioned queues for exactly-once batch
messaging, embedded in your process on LMDB.

>>> import tstreams_embedded as ts
>>> with ts.open("data/") as engine:
...     engine.create_stream("clicks", partitions=4)
...     engine.producer("clicks").instant([b"hello"])
"""

from __future__ import annotations

from . import errors
from .connecting import connect
from .engine.api.batch import Batch
from .engine.api.consumer import Consumer, Transaction
from .engine.api.engine import Engine
from .engine.api.group import CheckpointGroup
from .engine.api.producer import Producer, ProducerTransaction
from .engine.api.subscriber import Subscriber
from .engine.api.workqueue import Delivery, WorkQueue
from .engine.embedded import open_engine as open  # noqa: A001 - the public name is ts.open
from .engine.protocol.backend import StreamInfo
from .ids import txn_id_at, txn_time
from .policies import CancelIfOpened, CheckpointIfOpened, EnqueueIfOpened, ErrorIfOpened, Policy

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "CancelIfOpened",
    "CheckpointGroup",
    "CheckpointIfOpened",
    "Consumer",
    "Delivery",
    "Engine",
    "EnqueueIfOpened",
    "ErrorIfOpened",
    "Policy",
    "Producer",
    "ProducerTransaction",
    "StreamInfo",
    "Subscriber",
    "Transaction",
    "WorkQueue",
    "connect",
    "errors",
    "open",
    "txn_id_at",
    "txn_time",
]

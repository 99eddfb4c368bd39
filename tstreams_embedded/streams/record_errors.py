"""What an App does with a record it cannot process: bad input data, or a key that cannot be stored.

* **Bad input data** (Kafka Streams' deserialization exception handler): an item of a source
  stream that is a damaged envelope (not a msgpack array of four, or a field of the wrong
  type: :func:`~.records.unpack_envelope`), whose key or value its source's serde cannot
  decode (:class:`~tstreams_embedded.errors.SerdeError`), or whose timestamp (from the
  envelope or the source's extractor) is not a valid one
  (:class:`~tstreams_embedded.errors.InvalidArgument`, :func:`~.records.check_timestamp`),
  or more than ``App(max_future_ms=…)`` ahead of the app's clock
  (:class:`~tstreams_embedded.errors.TimestampTooFarAhead`: one record of the year 9999
  would otherwise move stream time there, make every later record late and let retention
  delete every window).
  A global table's damaged envelopes are bad data too.
* **A key that cannot be stored:** state-store keys are at most 255 bytes
  (``engine.state.MAX_STORE_KEY``; 16 fewer in a windowed store, whose keys carry the
  window). A record whose (serialized) key is longer cannot be put in a store: the store
  raises :class:`~tstreams_embedded.errors.StoreKeyTooLong`, naming the store, the key's
  length and the limit.

``App(on_record_error=...)`` decides, like Kafka Streams' deserialization / processing
exception handlers:

* ``"fail"`` (default): the exception ends ``run()`` (and a started app; ``stop()``
  re-raises it). Nothing of the failed transaction is committed, so the record stays
  where it is: the app fails again at the same record until it is run with ``"skip"``.
* ``"skip"``: the record is dropped and counted (``app.metrics["records_skipped_on_error"]``,
  Prometheus ``tstreams_streams_error_records_skipped_total{app, source="task"|"global"}``); the
  app continues. Bad input data is dropped before any processing. In a task, the
  processing of a record with a key too long stops at the store that refused it:
  what it did before (records forwarded to other branches) stays, as with Kafka Streams'
  ``CONTINUE``; it is committed with the task, exactly once. In a global table nothing of
  the record is applied.
* ``"dead_letter"``: as ``"skip"``, and a task also writes the record to the app's
  dead-letter stream (``App(dead_letter_stream=…)``, by default
  ``<application_id>-dead-letters``) in the same commit as the rest of its work, so each
  bad record is there exactly once across crashes: an envelope without key, stamped with
  its transaction's time, whose value is the msgpack map :func:`dead_letter` makes (the raw
  item, its source stream, partition, transaction ID and index in the transaction, and the
  error). A global table's bad records are only skipped (its updater writes no stream).

Under ``"skip"`` and ``"dead_letter"`` such records are counted in ``app.metrics``
(``records_skipped_on_error``; also ``records_dead_lettered`` for the latter).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

import msgpack
from prometheus_client import CollectorRegistry, Counter

from .. import errors


class RecordErrorPolicy(str, Enum):
    """``App(on_record_error=...)``: what a record that cannot be processed does (the
    documented strings are accepted and compare equal)."""

    FAIL = "fail"
    SKIP = "skip"
    DEAD_LETTER = "dead_letter"


#: the values of ``App(on_record_error=...)``
POLICIES = tuple(p.value for p in RecordErrorPolicy)
#: the ``app.metrics`` counter of skipped records
SKIPPED_METRIC = "records_skipped_on_error"
#: the ``app.metrics`` counter of records written to the dead-letter stream
DEAD_LETTERED_METRIC = "records_dead_lettered"


def dead_letter_stream_of(application_id: str) -> str:
    """The default dead-letter stream of an application."""
    return f"{application_id}-dead-letters"


def dead_letter(item: bytes, stream: str, partition: int, txn_id: int, index: int, error: BaseException) -> bytes:
    """The value of a dead-letter record: msgpack ``{"item", "stream", "partition",
    "txn_id", "index", "error"}`` (the error as ``"ClassName: message"``)."""
    return bytes(msgpack.packb({"item": item, "stream": stream, "partition": partition, "txn_id": txn_id,
                                "index": index, "error": f"{type(error).__name__}: {error}"}))


def check_policy(value: Any) -> RecordErrorPolicy:
    if value not in POLICIES:
        raise errors.InvalidArgument(f"on_record_error must be one of {POLICIES}, got {value!r:.40}")
    return RecordErrorPolicy(value)


class RecordErrors:
    """The record-error policy of an app instance, and its counters."""

    def __init__(self, policy: str, registry: CollectorRegistry, count: Callable[[str, int], None],
                 application_id: str) -> None:
        self.policy = check_policy(policy)
        self._count = count
        self._app = application_id
        self._skipped = Counter("tstreams_streams_error_records_skipped",
                                "Records skipped by on_record_error='skip' (bad input data, a key too long to store)",
                                ["app", "source"], registry=registry)

    def skip(self, source: str) -> bool:
        """A record of ``source`` (``"task"`` or ``"global"``) failed: True (and counted) if
        it is to be skipped, False if the error must be raised."""
        if self.policy == "fail":
            return False
        self._count(SKIPPED_METRIC, 1)
        self._skipped.labels(self._app, source).inc()
        return True

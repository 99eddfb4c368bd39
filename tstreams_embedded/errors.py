"""Every exception the public API raises.

All of them derive from :class:`TStreamsError`; several also derive from the matching
builtin (``ValueError``, ``KeyError``, ``ConnectionError``) so generic handlers still work.
The network layer sends the class name and message; :func:`error_from_wire` rebuilds the
same exception on the client side, so remote and embedded code catch the same classes.
"""

from __future__ import annotations


class TStreamsError(Exception):
    """Base class of every error raised by tstreams-embedded."""


class InvalidArgument(TStreamsError, ValueError):
    """An argument has the wrong type or an out-of-range value."""


class StreamExists(TStreamsError):
    """``create_stream`` was given a name that already exists."""


class StreamNotFound(TStreamsError, KeyError):
    """The named stream does not exist (or was deleted)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PartitionOutOfRange(TStreamsError, ValueError):
    """A partition number is outside ``0 .. partitions-1`` of its stream."""


class ItemTooLarge(TStreamsError, ValueError):
    """An item is larger than the engine's ``max_item_size``."""


class EngineClosed(TStreamsError):
    """The engine (or client) was closed; open a new one."""


class TransactionFinished(TStreamsError):
    """A checkpointed or cancelled transaction was used again."""


class TransactionExpired(TStreamsError):
    """An open transaction outlived its TTL (its producer stopped keeping it alive).

    Its data is discarded and it will never become visible."""


class TransactionNotFound(TStreamsError, KeyError):
    """No transaction with that ID exists in the partition."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TransactionAlreadyOpened(TStreamsError):
    """``new_transaction(policy=ErrorIfOpened)`` found an open transaction on the partition."""


class MarkerConflict(TStreamsError):
    """A guarded write found its marker already at or past the given value (a replayed batch)."""


class LeaseConflict(TStreamsError):
    """A lease operation or a fenced write (``Lease``, ``CheckLease``) found the lease held by
    another owner or at another epoch: it was taken over. Nothing was written."""


class ConsumerNotFound(TStreamsError, KeyError):
    """The named consumer has no stored offsets on the stream."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ArchiveGap(TStreamsError):
    """Commit-log entries are missing from an archive (they were trimmed before the archiver
    read them): a restore past them is impossible. Take a new base backup."""


class WorkQueueNotFound(TStreamsError, KeyError):
    """The work queue group does not exist on the stream (``engine.work_queue`` creates it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class DeliveryExpired(TStreamsError):
    """An acknowledgement (ack, nak, in-progress or term) named a delivery that is no longer
    current: the item's lock ran out and it was delivered again, or it was settled. Nothing
    was written (in a CheckpointGroup: nothing of the whole group)."""


class OffsetsConflict(TStreamsError):
    """A guarded offset reset found the consumer's stored offsets changed since they were read
    (a consumer is still running). Nothing was written."""


class StorageFull(TStreamsError):
    """The LMDB map could not grow (``max_map_size`` reached or the disk is full). Nothing was written."""


class DataCorrupted(TStreamsError):
    """Stored data failed an integrity check: a chunk's checksum does not match, a record
    does not decode, LMDB reports a damaged page, or the data directory is damaged
    (``data.mdb`` truncated, emptied, deleted or replaced). Nothing is returned from damaged
    data; the message says what is damaged and what to do (``tstreams check --data DIR``
    reports every problem). ``stream``, ``partition`` and ``txn_id`` locate a damaged chunk
    when known."""

    def __init__(self, message: str = "", *, stream: str | None = None, partition: int | None = None,
                 txn_id: int | None = None) -> None:
        super().__init__(message)
        self.stream = stream
        self.partition = partition
        self.txn_id = txn_id


class DataDirectoryNotFound(TStreamsError, FileNotFoundError):
    """``ts.open(path, create=False)`` found no initialised tstreams data directory at
    ``path`` (it is missing, or holds no tstreams data). Nothing was created."""


class DataDirectoryUnusable(TStreamsError, OSError):
    """The data directory cannot be created or opened: a parent is missing or not a
    directory, permission is denied, the file system is read-only or cannot hold one (such as
    ``/proc``), or its ``data.mdb`` or ``lock.mdb`` is a directory. Nothing was created."""


class TopologyError(TStreamsError, ValueError):
    """A stream-processing topology (:mod:`tstreams_embedded.streams`) is malformed: an
    unknown or duplicate name, a missing store, an operation that needs a key it lacks."""


class SerdeError(TStreamsError, ValueError):
    """A serde could not be built from its specification, or could not (de)serialize a
    key or value; the message names the stream and the data."""


class StoreNotFound(TStreamsError, KeyError):
    """No state store of that name in the application (or the processor was not given it)."""


class QueryTooLarge(TStreamsError, ValueError):
    """A read of state stores in one snapshot (``Backend.store_snapshot``, an interactive
    query of ``app.store(name)`` or of its HTTP endpoint) would return more bytes than its
    bound (16 MiB by default). Nothing was returned: narrow the query (a smaller key range,
    prefix or time range, fewer tasks) or give it a limit."""


class StoreKeyTooLong(InvalidArgument):
    """A stream-processing record's key cannot be a state-store key: store keys are at most
    255 bytes (``engine.storage.state_stores.MAX_STORE_KEY``). The message names the store, the key's length
    and the limit."""


class TimestampTooFarAhead(InvalidArgument):
    """A stream-processing record is stamped more than ``App(max_future_ms=…)`` ahead of the
    app's wall clock (one record of the year 9999 would make every later record late). The
    message names the stream, the transaction, the timestamp and the bound; the record goes
    to ``on_record_error``."""


class EngineBusy(TStreamsError):
    """The data directory is already open in a way that forbids this operation."""


class BindFailed(TStreamsError, OSError):
    """A server could not listen on an address it was given (``--bind``, ``--http``,
    ``--repl``): the port is taken, the host is not local, or it is not permitted. The
    server did not start; nothing was served."""


class RemoteError(TStreamsError, ConnectionError):
    """The server could not be reached or answered with an unknown error."""


class ProtocolError(TStreamsError):
    """A message on the wire was malformed."""


class ProtocolVersionError(ProtocolError):
    """The peer speaks a wire protocol version this side does not: a client newer than the
    server (the server answers in an older version), or a request of an unknown version.
    Nothing was executed; use a client and a server of the same release (a server also
    answers clients of the previous protocol version)."""


class RequestTooLarge(TStreamsError, ValueError):
    """A request is larger in total (all its frames) than the server accepts
    (``tstreams serve --max-request-size``, or has too many frames). It was not executed;
    split the work into smaller requests (fewer operations per submit or group)."""


class ServerBusy(TStreamsError):
    """The server did not execute a request because this client already has more data in
    flight (requests not yet answered, replies it has not read) than its budget
    (``tstreams serve --max-client-bytes``) and too much queued behind it. Nothing of the
    request was executed: read the replies owed, then send it again."""


class NotLeader(TStreamsError):
    """This cluster node is not the leader: it neither accepts writes nor serves reads.

    The message names the current leader and its client endpoint when one is known
    (``leader: n1 at tcp://…``); ``ts.connect("zk://…")`` follows the leader by itself."""


class ClusterUnavailable(TStreamsError, ConnectionError):
    """The cluster could not commit (no quorum, no leader, or the leader lost its
    ZooKeeper session) within the time allowed. For a write, the outcome is unknown:
    retry it with the same request ID (the cluster client does) to apply it at most once."""


class RetryWindowExceeded(TStreamsError):
    """A retried request is older than the replicated de-duplication window of its client,
    so whether it was applied can no longer be told; it was not applied again."""


class NodeDiverged(TStreamsError):
    """This node applied log entries that the cluster did not commit (possible only with
    ``--acks leader``); it must be re-synced from a snapshot before it serves again."""


def _all_error_classes() -> dict[str, type[TStreamsError]]:
    out: dict[str, type[TStreamsError]] = {}
    stack: list[type[TStreamsError]] = [TStreamsError]
    while stack:
        cls = stack.pop()
        out[cls.__name__] = cls
        stack.extend(cls.__subclasses__())
    return out


def error_to_wire(exc: BaseException) -> tuple[str, str]:
    """Return ``(class name, message)`` for an exception to travel in an error reply."""
    if isinstance(exc, TStreamsError):
        return type(exc).__name__, str(exc)
    if isinstance(exc, (TypeError, ValueError)):
        return "InvalidArgument", str(exc)
    return "TStreamsError", f"{type(exc).__name__}: {exc}"


def error_from_wire(name: str, message: str) -> TStreamsError:
    """Rebuild the exception named in an error reply (unknown names become ``TStreamsError``)."""
    cls = _all_error_classes().get(name, TStreamsError)
    return cls(message)

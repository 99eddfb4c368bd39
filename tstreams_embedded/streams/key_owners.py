"""Who runs the task that owns a key of a store (:func:`query_metadata_for_key`), and the
host an instance advertises for interactive queries (:func:`advertised_host`).

Apart from :mod:`.queries` (the HTTP endpoint, which needs Tornado), so that an app that
serves no queries does not import Tornado.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .. import errors
from .app_members import read_group
from .appview import AppView
from .metrics import AppMetrics
from .records import partition_of
from .stores import ReadOnlyKeyValueStore, ReadOnlyWindowStore
from .topology import StoreSpec


class RunningTask(Protocol):
    @property
    def partition(self) -> int: ...


class QueriedApp(AppView, Protocol):
    """What queries use of an app instance (:class:`~.app.App` is one)."""

    @property
    def lease_ms(self) -> int: ...

    @property
    def prometheus(self) -> AppMetrics: ...

    def store_spec(self, name: str) -> StoreSpec: ...

    def store(self, name: str, partitions: list[int] | None = None) -> ReadOnlyKeyValueStore | ReadOnlyWindowStore:
        """Committed state of store ``name`` of every task, or of the tasks ``partitions``."""

    def task_count(self) -> int: ...

    def running_tasks(self) -> Sequence[RunningTask]: ...


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Where a key of a store lives: its task (``partition``) and the instance running it
    (``member``, ``host``, ``port``; all None while no live instance holds the task)."""

    store: str
    partition: int
    member: str | None
    host: str | None
    port: int | None


def query_metadata_for_key(app: QueriedApp, store: str, key: Any) -> KeyQueryMetadata:
    """Which instance of ``app``'s application runs the task that owns ``key`` of ``store``.

    It assumes the store is partitioned by its key, as every DSL aggregation's store is
    (the input was grouped, or repartitioned, by that key)."""
    spec = app.store_spec(store)
    p = partition_of(spec.key_serde.serialize(key), app.task_count())
    view = read_group(app.engine.backend, app.application_id, app.lease_ms)
    owner = view.owner(p)
    info = view.members.get(owner) if owner is not None else None
    return KeyQueryMetadata(store, p, owner, info.host if info else None, info.port if info else None)


#: bind addresses that mean "every interface": not an address another machine can call
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", "*"})  # noqa: S104 - names to recognise, not to bind


def advertised_host(http_host: str, advertised: str | None) -> str:
    """The host an instance advertises for queries (as Kafka Streams' ``application.server``):
    ``advertised`` if given, else ``http_host``, unless that is a wildcard bind address
    (``0.0.0.0``, ``::``), which other machines cannot call: then this machine's fully
    qualified name (``socket.getfqdn()``)."""
    if advertised is not None:
        if not isinstance(advertised, str) or not advertised or advertised in WILDCARD_HOSTS:
            raise errors.InvalidArgument(f"advertised_host must be a host name or address other machines "
                                         f"can reach, got {advertised!r}")
        return advertised
    return socket.getfqdn() if http_host in WILDCARD_HOSTS else http_host

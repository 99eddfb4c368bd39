"""What the machinery of an app instance reads of the App that runs it.

:class:`AppView` is the part that the views of the tasks (``task.TaskHost``), the metrics
(``metrics.ObservedApp``) and the queries (``queries.QueriedApp``) have in common; each adds
what it uses besides. :class:`~.app.App` satisfies them all, and none of them imports it.
"""

from __future__ import annotations

from typing import Protocol

from ..engine.api.engine import Engine
from .topology import Topology


class AppView(Protocol):
    """An app instance: its engine, application id and topology."""

    @property
    def engine(self) -> Engine: ...

    @property
    def application_id(self) -> str: ...

    @property
    def topology(self) -> Topology: ...

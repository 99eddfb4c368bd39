"""Number options of the ``tstreams`` commands: finite floats within bounds.

``click.FloatRange`` lets ``nan`` and ``inf`` through (a comparison with ``nan`` is always
false), and a huge finite value such as ``1e308`` passes an open upper bound. Given to a
timeout, any of them made a command wait forever. :class:`FiniteFloat` refuses them: an
option of this type is a usage error (one line, exit status 2) unless it is a finite number
within its bounds. Every float option of ``tstreams`` uses it.
"""

from __future__ import annotations

import math
from typing import Any

import click

#: the longest wait a ``--timeout`` may ask for (a day)
MAX_TIMEOUT = 86_400.0
#: the longest period an interval option may ask for (a year)
MAX_PERIOD = 365 * 86_400.0


class FiniteFloat(click.FloatRange):
    """A finite float in ``[min, max]`` (``min_open``/``max_open`` exclude the bound); the
    upper bound is required, so that no value can mean "wait forever"."""

    def __init__(self, min: float | None = None, max: float = MAX_PERIOD, min_open: bool = False,
                 max_open: bool = False) -> None:
        super().__init__(min=min, max=max, min_open=min_open, max_open=max_open)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number (expected {self._describe_range()})", param, ctx)
        return super().convert(number, param, ctx)


def seconds(min: float = 0.0, max: float = MAX_PERIOD, min_open: bool = False) -> FiniteFloat:
    """A number of seconds in ``[min, max]`` (``(min, max]`` with ``min_open``)."""
    return FiniteFloat(min=min, max=max, min_open=min_open)

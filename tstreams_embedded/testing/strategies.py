"""Hypothesis strategies for property tests of code built on tstreams-embedded.

They generate plain data (bytes, lists, integers), not engine calls, so that a test
decides what to do with them::

    from hypothesis import given
    from tstreams_embedded.testing import strategies as tst

    @given(batches=tst.transaction_lists(), crash_after=tst.crash_points(max_operations=20))
    def test_my_consumer(batches, crash_after): ...

Sizes are bounded by default so that examples stay fast; widen them with the arguments.
Requires ``hypothesis`` (the ``dev`` extra).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

#: Characters of generated stream and consumer names.
NAME_ALPHABET = string.ascii_lowercase + string.digits + "-_."


def items(min_size: int = 0, max_size: int = 64) -> st.SearchStrategy[bytes]:
    """One item: ``bytes`` of ``min_size`` to ``max_size`` bytes."""
    return st.binary(min_size=min_size, max_size=max_size)


def transactions(min_items: int = 1, max_items: int = 8, min_item_size: int = 0,
                 max_item_size: int = 64) -> st.SearchStrategy[list[bytes]]:
    """The items of one transaction: a list of ``min_items`` to ``max_items`` items."""
    return st.lists(items(min_item_size, max_item_size), min_size=min_items, max_size=max_items)


def transaction_lists(min_transactions: int = 0, max_transactions: int = 10, *, min_items: int = 1,
                      max_items: int = 8, max_item_size: int = 64) -> st.SearchStrategy[list[list[bytes]]]:
    """Several transactions in order (a list of lists of bytes), for example what a
    producer sends."""
    return st.lists(transactions(min_items, max_items, 0, max_item_size), min_size=min_transactions,
                    max_size=max_transactions)


def partition_counts(max_partitions: int = 4) -> st.SearchStrategy[int]:
    """A number of partitions for ``create_stream``: 1 to ``max_partitions``."""
    return st.integers(min_value=1, max_value=max_partitions)


def partitions(count: int) -> st.SearchStrategy[int]:
    """A partition of a stream with ``count`` partitions: 0 to ``count - 1``."""
    if count < 1:
        raise ValueError("a stream has at least one partition")
    return st.integers(min_value=0, max_value=count - 1)


def partitioned_transactions(count: int, min_transactions: int = 0, max_transactions: int = 10, *,
                             max_items: int = 8,
                             max_item_size: int = 64) -> st.SearchStrategy[list[tuple[int, list[bytes]]]]:
    """Transactions each with its target partition: ``[(partition, items), ...]`` for a stream
    of ``count`` partitions."""
    return st.lists(st.tuples(partitions(count), transactions(1, max_items, 0, max_item_size)),
                    min_size=min_transactions, max_size=max_transactions)


def names(max_size: int = 24) -> st.SearchStrategy[str]:
    """A valid stream or consumer name (ASCII letters, digits, ``-_.``)."""
    return st.text(NAME_ALPHABET, min_size=1, max_size=max_size)


def crash_points(max_operations: int, min_operations: int = 0) -> st.SearchStrategy[int]:
    """Where to crash, as "after N acknowledged operations": an integer from
    ``min_operations`` to ``max_operations``. ``0`` crashes before the first one, and
    ``max_operations`` (when it is the total) means "no crash", which a property should
    also hold for."""
    if not 0 <= min_operations <= max_operations:
        raise ValueError("need 0 <= min_operations <= max_operations")
    return st.integers(min_value=min_operations, max_value=max_operations)


def crash_point_in(steps: Sequence[T]) -> st.SearchStrategy[int]:
    """A crash point in a list of steps: the index of the first step not done, from ``0``
    (nothing done) to ``len(steps)`` (everything done)."""
    return st.integers(min_value=0, max_value=len(steps))


def crash_plans(max_operations: int, max_crashes: int = 3) -> st.SearchStrategy[list[int]]:
    """Several crash points in one run: a sorted list of distinct operation counts at which
    the process under test is killed and restarted."""
    return st.lists(crash_points(max_operations), max_size=max_crashes, unique=True).map(sorted)

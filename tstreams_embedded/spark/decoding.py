"""How a read turns stored items into its ``value`` column: the format (option
``valueFormat``) and what an item that is not in that format does (option ``mode``, as in
Spark's JSON source):

* ``failfast`` (the default): the query fails, naming the partition, transaction and item;
* ``permissive``: the row is kept with a null ``value``, and its stored bytes go to an extra
  binary column, ``_corrupt_record`` (option ``columnNameOfCorruptRecord``), null in the
  other rows;
* ``dropMalformed``: the row is left out.

``binary`` values are never malformed, so ``mode`` goes with ``string``, ``json`` and
``msgpack`` only.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("failfast", "permissive", "dropmalformed")
DEFAULT_CORRUPT_COLUMN = "_corrupt_record"


@dataclass(frozen=True)
class Decoding:
    """``value_format`` and ``mode`` (lower case, one of :data:`MODES`) of a read, and the
    corrupt-record column of ``permissive``."""

    value_format: str = "binary"
    mode: str = "failfast"
    corrupt_column: str = DEFAULT_CORRUPT_COLUMN

    @property
    def strict(self) -> bool:
        """Whether a malformed item fails the read."""
        return self.mode == "failfast"

    @property
    def corrupt(self) -> str | None:
        """The name of the corrupt-record column, if the rows have one."""
        return self.corrupt_column if self.mode == "permissive" else None


def as_decoding(value: str | Decoding) -> Decoding:
    """A :class:`Decoding` for a value format name (strict) or a decoding."""
    return value if isinstance(value, Decoding) else Decoding(value)

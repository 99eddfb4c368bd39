"""Typed JSON: convert and check values against type hints, for the ``dataclass`` and
``TypedDict`` serdes (:mod:`.serdes`).

:func:`to_json` turns a value of a hint into what JSON holds and :func:`from_json` turns
decoded JSON back, each checking it on the way; a mismatch raises
:class:`~tstreams_embedded.errors.SerdeError` naming the field (``View.page``,
``Outer.items[2].when``). Hints understood:

* ``str``, ``int`` (not ``bool``), ``float`` (an ``int`` is accepted and becomes a float;
  NaN and infinities are refused: JSON has none), ``bool``, ``None``;
* ``datetime.datetime`` as an ISO 8601 string (``datetime.isoformat()``: a naive datetime
  stays naive, an aware one keeps its UTC offset, not its zone's name), ``datetime.date`` as ``YYYY-MM-DD``;
* ``enum.Enum`` subclasses, by value; ``Literal[...]``;
* ``list[T]``, ``tuple[T, ...]``, ``dict[str, T]``; ``Optional[T]``, ``T | None`` and other
  unions (the first that fits);
* nested dataclasses and ``TypedDict`` classes (fields checked the same way);
* ``Any``, and any other hint, as it is (no check).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import math
import types
import typing
from typing import Any

from .. import errors


@functools.lru_cache(maxsize=1024)
def hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of ``cls`` (a class whose hints cannot be resolved, such as
    one defined inside a function with postponed annotations, has its fields unchecked)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable hints: fields stay unchecked
        return {}


def _fail(path: str, expected: str, value: Any) -> errors.SerdeError:
    return errors.SerdeError(f"{path}: expected {expected}, got {type(value).__name__} {value!r:.60}")


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def to_json(value: Any, hint: Any, path: str) -> Any:
    """``value`` (of type ``hint``) as JSON data; SerdeError naming ``path`` if it is not one."""
    return _convert(value, hint, path, True)


def from_json(data: Any, hint: Any, path: str) -> Any:
    """Decoded JSON ``data`` as a value of type ``hint``; SerdeError naming ``path`` if it is not one."""
    return _convert(data, hint, path, False)


def _convert(value: Any, hint: Any, path: str, out: bool) -> Any:  # noqa: C901 - one case per kind of hint
    if hint is Any or hint is object:
        return value
    if hint is None or hint is type(None):
        if value is not None:
            raise _fail(path, "None", value)
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        for arm in typing.get_args(hint):
            try:
                return _convert(value, arm, path, out)
            except errors.SerdeError:
                continue
        raise _fail(path, " or ".join(_name(a) for a in typing.get_args(hint)), value)
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            raise _fail(path, f"one of {typing.get_args(hint)!r}", value)
        return value
    if origin in (list, tuple, dict):
        return _container(value, hint, origin, path, out)
    if not isinstance(hint, type):
        return value  # another special form: not checked
    if hint is bool:
        if not isinstance(value, bool):
            raise _fail(path, "bool", value)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(path, "int", value)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _fail(path, "float", value)
        if not math.isfinite(value):
            raise _fail(path, "a finite float (JSON has no NaN or infinity)", value)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise _fail(path, "str", value)
        return value
    if hint is dt.datetime or hint is dt.date:
        return _time(value, hint, path, out)
    if issubclass(hint, enum.Enum):
        if out:
            if not isinstance(value, hint):
                raise _fail(path, hint.__name__, value)
            return value.value
        try:
            return hint(value)
        except ValueError:
            raise _fail(path, f"a value of {hint.__name__}", value) from None
    if dataclasses.is_dataclass(hint):
        return dataclass_to_json(value, hint, path) if out else dataclass_from_json(value, hint, path)
    if typing.is_typeddict(hint):
        return typeddict_convert(value, hint, path, out)
    if not isinstance(value, hint) and out:
        raise _fail(path, hint.__name__, value)
    return value


def _container(value: Any, hint: Any, origin: Any, path: str, out: bool) -> Any:
    args = typing.get_args(hint)
    if origin is dict:
        if not isinstance(value, dict):
            raise _fail(path, "dict", value)
        key_hint, value_hint = args if len(args) == 2 else (Any, Any)
        result = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _fail(f"{path} key", "str (JSON object keys are strings)", k)
            result[_convert(k, key_hint, f"{path}[{k!r}]", out)] = _convert(v, value_hint, f"{path}[{k!r}]", out)
        return result
    wanted = (list, tuple) if out else list
    if not isinstance(value, wanted):
        raise _fail(path, "list", value)
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            raise _fail(path, f"{len(args)} items", value)
        items = [_convert(v, a, f"{path}[{i}]", out) for i, (v, a) in enumerate(zip(value, args, strict=True))]
    else:
        item_hint = args[0] if args else Any
        items = [_convert(v, item_hint, f"{path}[{i}]", out) for i, v in enumerate(value)]
    return items if out or origin is list else tuple(items)


def _time(value: Any, hint: type, path: str, out: bool) -> Any:
    if out:
        if not isinstance(value, hint) or (hint is dt.date and isinstance(value, dt.datetime)):
            raise _fail(path, hint.__name__, value)
        return typing.cast(Any, value).isoformat()
    if not isinstance(value, str):
        raise _fail(path, f"an ISO 8601 {hint.__name__} string", value)
    try:
        return hint.fromisoformat(value)  # type: ignore[attr-defined]
    except ValueError:
        raise _fail(path, f"an ISO 8601 {hint.__name__} string", value) from None


def dataclass_to_json(obj: Any, cls: type, path: str) -> dict[str, Any]:
    """The fields of dataclass instance ``obj`` as a JSON object, checked."""
    if not isinstance(obj, cls):
        raise _fail(path, cls.__name__, obj)
    types_of = hints(cls)
    return {f.name: _convert(getattr(obj, f.name), types_of.get(f.name, Any), f"{path}.{f.name}", True)
            for f in dataclasses.fields(cls)}


def dataclass_from_json(data: Any, cls: type, path: str) -> Any:
    """An instance of dataclass ``cls`` from a decoded JSON object, checked."""
    if not isinstance(data, dict):
        raise _fail(path, f"a {cls.__name__} object", data)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(fields)
    if unknown:
        raise errors.SerdeError(f"{path}: unknown fields {sorted(unknown)} (fields {sorted(fields)})")
    types_of = hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name in data:
            kwargs[name] = _convert(data[name], types_of.get(name, Any), f"{path}.{name}", False)
        elif f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise errors.SerdeError(f"{path}.{name}: missing (a required field of {cls.__name__})")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise errors.SerdeError(f"{path}: not a {cls.__name__}: {exc}") from None


def typeddict_convert(value: Any, cls: type, path: str, out: bool) -> dict[str, Any]:
    """A ``TypedDict`` checked (keys and value types) and converted either way."""
    required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    types_of = hints(cls)
    if not isinstance(value, dict) or not required <= set(value) or set(value) - set(types_of):
        raise errors.SerdeError(f"{path}: not a {cls.__name__} (keys {sorted(types_of)}, required "
                                f"{sorted(required)}): {value!r:.80}")
    return {k: _convert(v, types_of[k], f"{path}.{k}", out) for k, v in value.items()}

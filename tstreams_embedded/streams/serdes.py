"""Serdes: how keys and values become bytes and back.

A serde is given by name (``"json"``, ``"msgpack"``, ``"str"``, ``"bytes"``; and
``"windowed(<name>)"`` for the key of a windowed result, :class:`WindowedSerde`), as a
``dataclass`` or ``TypedDict`` class (typed JSON), or as any object with ``serialize`` and
``deserialize`` (:class:`Serde`). :func:`serde` resolves the specification once, when the
topology is built. JSON uses ``orjson`` when it is installed, else the standard library.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import typing
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import msgpack

from .. import errors
from . import typed
from .windows import Windowed

try:  # pragma: no cover - depends on the installation
    import orjson

    _json_dumps: Callable[[Any], bytes] = orjson.dumps
    _json_loads: Callable[[bytes], Any] = orjson.loads
    JSON_LIBRARY = "orjson"
except ImportError:  # pragma: no cover
    def _json_dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode("utf-8")

    _json_loads = json.loads
    JSON_LIBRARY = "json"


@runtime_checkable
class Serde(Protocol):
    """Turns objects into bytes and back."""

    def serialize(self, obj: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...


class JsonSerde:
    """JSON (``orjson`` when installed)."""

    name = "json"

    def serialize(self, obj: Any) -> bytes:
        try:
            return _json_dumps(obj)
        except (TypeError, ValueError) as exc:
            raise errors.SerdeError(f"cannot serialize {obj!r:.80} as JSON: {exc}") from None

    def deserialize(self, data: bytes) -> Any:
        try:
            return _json_loads(data)
        except ValueError as exc:
            raise errors.SerdeError(f"not JSON: {bytes(data)[:80]!r} ({exc})") from None


class _Packers(threading.local):
    """One msgpack packer per thread (``msgpack.packb`` makes a new one per call, most of its
    cost for small values; a packer resets itself when a ``pack`` fails)."""

    def __init__(self) -> None:
        self.packer = msgpack.Packer(use_bin_type=True)


_packers = _Packers()


class MsgpackSerde:
    """msgpack (tuples come back as lists)."""

    name = "msgpack"

    def serialize(self, obj: Any) -> bytes:
        try:
            data: bytes = _packers.packer.pack(obj)
            return data
        except (TypeError, ValueError, OverflowError) as exc:
            raise errors.SerdeError(f"cannot serialize {obj!r:.80} as msgpack: {exc}") from None

    def deserialize(self, data: bytes) -> Any:
        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is bad data
            raise errors.SerdeError(f"not msgpack: {bytes(data)[:80]!r} ({exc})") from None


class StrSerde:
    """UTF-8 text."""

    name = "str"

    def serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise errors.SerdeError(f"the str serde needs a str, got {type(obj).__name__}")
        return obj.encode("utf-8", "surrogatepass")

    def deserialize(self, data: bytes) -> Any:
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise errors.SerdeError(f"not UTF-8: {bytes(data)[:80]!r} ({exc})") from None


class BytesSerde:
    """Bytes as they are."""

    name = "bytes"

    def serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise errors.SerdeError(f"the bytes serde needs bytes, got {type(obj).__name__}")
        return bytes(obj)

    def deserialize(self, data: bytes) -> Any:
        return bytes(data)


class DataclassSerde:
    """A dataclass as a JSON object of its fields, converted and checked by their type hints
    both ways (nested dataclasses, datetimes as ISO 8601, …: see :mod:`.typed`)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.fields = {f.name for f in dataclasses.fields(cls)}
        self.name = cls.__name__

    def serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, self.cls):
            raise errors.SerdeError(f"the {self.name} serde needs a {self.name}, got {type(obj).__name__}")
        return JsonSerde().serialize(typed.dataclass_to_json(obj, self.cls, self.name))

    def deserialize(self, data: bytes) -> Any:
        return typed.dataclass_from_json(JsonSerde().deserialize(data), self.cls, self.name)


class TypedDictSerde:
    """A ``TypedDict`` as a JSON object; keys and value types are checked both ways (see
    :mod:`.typed`)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
        self.allowed = frozenset(typed.hints(cls))
        self.name = cls.__name__

    def serialize(self, obj: Any) -> bytes:
        return JsonSerde().serialize(typed.typeddict_convert(obj, self.cls, self.name, True))

    def deserialize(self, data: bytes) -> Any:
        return typed.typeddict_convert(JsonSerde().deserialize(data), self.cls, self.name, False)


class WindowedSerde:
    """A :class:`~.windows.Windowed` key: the msgpack array ``[key bytes, start, end]``, the
    key's bytes by ``inner``, ``start`` and ``end`` the window's epoch ms (``[start, end)``).
    By name: ``"windowed(str)"`` (any named serde inside)."""

    def __init__(self, inner: Serde) -> None:
        self.inner = inner
        self.name = f"windowed({getattr(inner, 'name', type(inner).__name__)})"

    def serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, Windowed):
            raise errors.SerdeError(f"a windowed key must be a Windowed, got {type(obj).__name__}")
        return MsgpackSerde().serialize([self.inner.serialize(obj.key), obj.start, obj.end])

    def deserialize(self, data: bytes) -> Any:
        v = MsgpackSerde().deserialize(data)
        if not isinstance(v, list) or len(v) != 3 or not isinstance(v[0], bytes) \
                or not all(type(x) is int for x in v[1:]):
            raise errors.SerdeError(f"not a windowed key ([key bytes, start, end]): {bytes(data)[:80]!r}")
        key = self.inner.deserialize(v[0])
        return Windowed(tuple(key) if isinstance(key, list) else key, v[1], v[2])


def describe(s: Serde) -> str:
    """How ``s`` makes bytes, as far as can be told: equal for serdes of the same kind (a
    named serde, the same dataclass or TypedDict, a windowed key of equal inner serdes, or
    objects of one user class). Joins compare the key serdes of their sides with it."""
    if isinstance(s, WindowedSerde):
        return f"windowed({describe(s.inner)})"
    if isinstance(s, (DataclassSerde, TypedDictSerde)):
        return f"{s.cls.__module__}.{s.cls.__qualname__}"
    if isinstance(s, (JsonSerde, MsgpackSerde, StrSerde, BytesSerde)):
        return s.name
    return f"{type(s).__module__}.{type(s).__qualname__}"


NAMED: dict[str, Callable[[], Serde]] = {"json": JsonSerde, "msgpack": MsgpackSerde, "str": StrSerde,
                                         "bytes": BytesSerde}

SerdeSpec = str | type | Serde
"""What a ``key_serde=`` / ``value_serde=`` argument accepts."""


def serde(spec: Any, what: str = "serde") -> Serde:
    """The serde of a specification (see the module docstring); :class:`SerdeError` if it is none."""
    if isinstance(spec, str):
        inner = spec[len("windowed("):-1] if spec.startswith("windowed(") and spec.endswith(")") else None
        make = NAMED.get(spec if inner is None else inner)
        if make is None:
            raise errors.SerdeError(f"unknown {what} {spec!r}; known: {', '.join(NAMED)}, windowed(<one of them>), "
                                    "a dataclass, a TypedDict or an object with serialize/deserialize")
        return make() if inner is None else WindowedSerde(make())
    if isinstance(spec, type):
        if dataclasses.is_dataclass(spec):
            return DataclassSerde(spec)
        if typing.is_typeddict(spec):
            return TypedDictSerde(spec)
    elif isinstance(spec, Serde):
        return spec
    raise errors.SerdeError(f"{what} must be a serde name ({', '.join(NAMED)}), a dataclass, a TypedDict or an "
                            f"object with serialize/deserialize, got {spec!r:.80}")

"""Turning the wire types (dataclasses) into JSON bodies and JSON answers back into them.

One generic codec driven by the dataclasses' type hints, so each wire type is declared once.
Unknown fields in answers are ignored (the service may add some); fields left ``None`` in a
request are left out (the service treats absent and null alike, and denies unknown ones).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, TypeVar, Union

from ._errors import ProtocolError

T = TypeVar("T")

_hints_cache: dict[type, dict[str, Any]] = {}


def to_json_bytes(value: Any) -> bytes:
    """The exact bytes sent as a request body (a signature's Content-Digest covers them)."""
    return json.dumps(to_plain(value), separators=(",", ":")).encode()


def to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if item is None or field.metadata.get("wire") is False:
                continue
            out[field.name] = to_plain(item)
        return out
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def decode(cls: type[T], data: Any) -> T:
    """``data`` (parsed JSON) as ``cls``; a missing required field is a protocol error."""
    try:
        return typing.cast(T, _decode(cls, data))
    except (TypeError, ValueError, KeyError) as err:
        raise ProtocolError(f"unexpected answer for {cls.__name__}: {err}") from err


def _hints(cls: type) -> dict[str, Any]:
    hints = _hints_cache.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _hints_cache[cls] = hints
    return hints


def _decode(tp: Any, data: Any) -> Any:
    if tp is Any:
        return data
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if data is None:
            return None
        return _decode(args[0], data)
    if origin is list:
        if not isinstance(data, list):
            raise TypeError(f"expected a list, got {type(data).__name__}")
        (item,) = typing.get_args(tp)
        return [_decode(item, v) for v in data]
    if origin is dict:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        return dict(data)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(data).__name__}")
        hints = _hints(tp)
        kwargs: dict[str, Any] = {}
        for field in dataclasses.fields(tp):
            if field.name in data:
                kwargs[field.name] = _decode(hints[field.name], data[field.name])
            elif (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                raise KeyError(f"{tp.__name__}.{field.name} is missing")
        return tp(**kwargs)
    if tp is float and isinstance(data, int):
        return float(data)
    if tp in (int, str, bool, float):
        if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
            raise TypeError(f"expected {tp.__name__}, got {type(data).__name__}")
        return data
    return data

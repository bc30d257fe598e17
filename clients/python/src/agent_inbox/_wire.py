"""Turning the wire types (dataclasses) into JSON bodies and JSON answers back into them.

One generic codec driven by the dataclasses' type hints, so each wire type is declared once.
Unknown fields in answers are ignored (the service may add some); fields left ``None`` in a
request are left out (the service treats absent and null alike, and denies unknown ones). A
field whose wire name is a Python keyword has a trailing underscore (``class_``), as the
generator of ``_openapi.py`` names it, or says its name in its metadata (``{"name": ...}``); a
field with ``{"wire": False}`` is the client's own. A ``Literal`` field takes any string: the
service may add a value.
"""

from __future__ import annotations

import dataclasses
import json
import keyword
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union

from ._errors import ProtocolError

T = TypeVar("T")

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
            out[wire_name(field)] = to_plain(item)
        return out
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def wire_name(field: dataclasses.Field[Any]) -> str:
    """A field's name in JSON."""
    name: str = field.metadata.get("name", field.name)
    if name.endswith("_") and keyword.iskeyword(name[:-1]):
        return name[:-1]
    return name


def decode(cls: type[T], data: Any) -> T:
    """``data`` (parsed JSON) as ``cls``; a missing required field is a protocol error."""
    try:
        return typing.cast(T, _decoder(cls)(data))
    except (TypeError, ValueError, KeyError) as err:
        raise ProtocolError(f"unexpected answer for {cls.__name__}: {err}") from err


Decoder = Callable[[Any], Any]
_decoders: dict[Any, Decoder] = {}


def _decoder(tp: Any) -> Decoder:
    """A function decoding one type, built once per type from its hints: answers carry
    hundreds of events, so the per-value work is kept to a dict lookup and a type check."""
    found = _decoders.get(tp)
    if found is None:
        found = _build(tp)
        _decoders[tp] = found
    return found


def _identity(data: Any) -> Any:
    return data


def _build(tp: Any) -> Decoder:
    if tp is Any:
        return _identity
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = _decoder(args[0])
        return lambda data: None if data is None else inner(data)
    if origin is typing.Literal:
        # The type of the values (str), not the values: a newer service may send another.
        kinds = {type(value) for value in typing.get_args(tp)}
        (kind,) = kinds if len(kinds) == 1 else (object,)
        return lambda data: _checked(data, kind) if kind is not object else data
    if origin is list:
        (item_type,) = typing.get_args(tp)
        item = _decoder(item_type)

        def decode_list(data: Any) -> Any:
            if not isinstance(data, list):
                raise TypeError(f"expected a list, got {type(data).__name__}")
            return [item(v) for v in data]

        return decode_list
    if origin is dict:

        def decode_dict(data: Any) -> Any:
            if not isinstance(data, dict):
                raise TypeError(f"expected an object, got {type(data).__name__}")
            return data

        return decode_dict
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build_dataclass(tp)
    if tp is float:
        return lambda data: float(data) if isinstance(data, int) and not isinstance(data, bool) else _checked(data, float)
    if tp in (int, str, bool):
        return lambda data: _checked(data, tp)
    return _identity


def _checked(data: Any, tp: type) -> Any:
    if type(data) is not tp:
        raise TypeError(f"expected {tp.__name__}, got {type(data).__name__}")
    return data


def _build_dataclass(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    # Per field: (name, required, plain type to check inline or None, nullable, decoder).
    fields: list[tuple[str, str, bool, type | None, bool, Decoder]] = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("wire") is False:
            continue
        tp = hints[f.name]
        nullable = False
        origin = typing.get_origin(tp)
        if origin is Union or origin is types.UnionType:
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) == 1 and args[0] in (int, str, bool):
                tp, nullable = args[0], True
        plain = tp if tp in (int, str, bool) else None
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        fields.append((f.name, wire_name(f), required, plain, nullable, _decoder(tp)))

    def decode_dataclass(data: Any) -> Any:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object for {cls.__name__}, got {type(data).__name__}")
        kwargs = {}
        for name, wire_name, required, plain, nullable, decode_field in fields:
            if wire_name not in data:
                if required:
                    raise KeyError(f"{cls.__name__}.{wire_name} is missing")
                continue
            value = data[wire_name]
            if plain is not None:
                if type(value) is not plain and not (nullable and value is None):
                    raise TypeError(f"{cls.__name__}.{name}: expected {plain.__name__}, got {type(value).__name__}")
                kwargs[name] = value
            else:
                kwargs[name] = decode_field(value)
        return cls(**kwargs)

    return decode_dataclass

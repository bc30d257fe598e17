"""The wire types (the dataclasses of ``agent_inbox._models``) checked against the service's
OpenAPI document (``openapi.json`` at the repository root, regenerated from the server and
checked by the Rust tests). A field the server adds, renames or makes nullable fails here until
the client knows it. No server is needed.

Each dataclass is compared with the schema of the same name (``SCHEMA_OF`` names the
exceptions). How strict each rule is depends on the direction the schema travels (from the
document's paths), and on what the codec in ``_wire.py`` does with a field:

- every schema property is a field (its wire name: ``metadata["name"]`` or the field's name),
  unless ``IGNORED`` says why the client leaves it out; no field is missing from the schema;
  fields with ``metadata["wire"] = False`` are the client's own and not compared;
- answers: a field without a default (which decoding requires) is required by the schema; a
  field the schema lets be null has ``None`` in its type (decoding checks plain types);
- requests: a field the schema requires is always sent (no default, or one other than ``None``:
  ``None`` is left out of the body);
- a field whose schema is a string, integer, number or boolean (or an array of one) is typed so;
- a field whose schema refers to another schema holds that schema's dataclass.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_inbox import _contract, _core, _models

OPENAPI = Path(__file__).resolve().parents[3] / "openapi.json"
REF_PREFIX = "#/components/schemas/"

#: Dataclasses named differently from their schema (none today).
SCHEMA_OF: dict[str, str] = {}

#: Schema properties the client deliberately leaves out, each with its reason.
IGNORED: dict[str, set[str]] = {
    # The access token names the tenant and the agent; the client never names others, which the
    # service refuses anyway.
    "SubscribeRequest": {"tenant_id", "agent_id"},
    "PollRequest": {"tenant_id", "recipient_id"},
    "ClaimRequest": {"tenant_id", "recipient_id"},
    "AcknowledgeRequest": {"tenant_id", "recipient_id"},
    "ReleaseRequest": {"tenant_id", "recipient_id"},
    "HeartbeatRequest": {"tenant_id", "recipient_id"},
    # Publishing with an agent token: the tenant is the token's.
    "PublishRequest": {"tenant_id"},
}


def test_every_wire_dataclass_matches_its_schema() -> None:
    document = json.loads(OPENAPI.read_text())
    schemas: dict[str, Any] = document["components"]["schemas"]
    requests, answers = directions(document)
    classes = wire_dataclasses()
    dataclass_of = {SCHEMA_OF.get(cls.__name__, cls.__name__): cls for cls in classes}
    problems: list[str] = []
    for cls in classes:
        schema_name = SCHEMA_OF.get(cls.__name__, cls.__name__)
        where = cls.__name__ if schema_name == cls.__name__ else f"{cls.__name__} (schema {schema_name})"
        if schema_name not in schemas:
            problems.append(f"{where}: no schema {schema_name} in openapi.json (name it in SCHEMA_OF)")
            continue
        if schema_name not in requests and schema_name not in answers:
            problems.append(f"{where}: schema {schema_name} is in no request or answer of openapi.json")
        properties, required = flatten(schemas[schema_name], schemas)
        ignored = IGNORED.get(schema_name, set())
        hints = typing.get_type_hints(cls)
        fields = {
            f.metadata.get("name", f.name): f for f in dataclasses.fields(cls) if f.metadata.get("wire") is not False
        }
        for name in sorted(ignored):
            if name not in properties:
                problems.append(f"{where}: IGNORED names {name}, which the schema no longer has")
            if name in fields:
                problems.append(f"{where}: IGNORED names {name}, which the dataclass has")
        for name in properties:
            if name not in fields and name not in ignored:
                problems.append(f"{where}: the schema has {name}, the dataclass lacks it")
        for name, f in fields.items():
            spec = properties.get(name)
            if spec is None:
                problems.append(f"{where}: the dataclass has {name}, the schema lacks it")
                continue
            hint = hints[f.name]
            no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if schema_name in answers:
                if no_default and name not in required:
                    problems.append(f"{where}.{name}: may be absent from the answer, but decoding requires it")
                if is_nullable(spec) and not allows_none(hint):
                    problems.append(f"{where}.{name}: may be null in the answer, but its type has no None")
            if schema_name in requests and name in required and not no_default and f.default is None:
                problems.append(f"{where}.{name}: the service requires it, but None leaves it out")
            scalar = scalar_of(spec)
            have = set(scalars_in(hint))
            if scalar is not None and hint is not Any and scalar not in have:
                names = " | ".join(sorted(t.__name__ for t in have)) or "no such type"
                problems.append(f"{where}.{name}: {scalar.__name__} in the schema, {names} here")
            held = {c.__name__ for c in dataclasses_in(hint)}
            for target in sorted(references(spec)):
                expected = dataclass_of.get(target)
                if expected is None:
                    problems.append(f"{where}.{name}: refers to schema {target}, which no dataclass stands for")
                elif expected.__name__ not in held:
                    problems.append(f"{where}.{name}: should hold {expected.__name__} (schema {target}), holds {sorted(held) or 'none'}")
    assert problems == [], "wire types differ from openapi.json:\n  " + "\n  ".join(problems)


def test_quarantine_classes_match_the_schema() -> None:
    document = json.loads(OPENAPI.read_text())
    spec = document["components"]["schemas"]["AckEntry"]["properties"]["class"]
    assert set(_contract.QUARANTINE_CLASSES) == {v for v in spec["enum"] if v is not None}


def test_problem_members_match_the_schema() -> None:
    """``problem()`` reads these members and hands every other one on as an extension."""
    document = json.loads(OPENAPI.read_text())
    properties, _ = flatten(document["components"]["schemas"]["Problem"], document["components"]["schemas"])
    assert set(_core.PROBLEM_MEMBERS) == set(properties)


def test_the_stream_signal_has_the_head_the_transport_reads() -> None:
    """The SSE transport reads ``head_seq`` from each ``inbox.updated`` signal's raw JSON."""
    document = json.loads(OPENAPI.read_text())
    signal = document["components"]["schemas"]["StreamSignal"]
    assert "head_seq" in signal["required"] and signal["properties"]["head_seq"]["type"] == "integer"


def wire_dataclasses() -> list[type]:
    """Every dataclass defined in ``_models``: a new one is checked without a list to forget."""
    return [
        value
        for value in vars(_models).values()
        if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == _models.__name__
    ]


def directions(document: dict[str, Any]) -> tuple[set[str], set[str]]:
    """Schemas sent in request bodies and schemas in answers, with every schema they refer to."""
    requests: set[str] = set()
    answers: set[str] = set()
    for operations in document["paths"].values():
        for operation in operations.values():
            if isinstance(operation, dict):
                requests |= references(operation.get("requestBody", {}))
                answers |= references(operation.get("responses", {}))
    schemas = document["components"]["schemas"]

    def close(names: set[str]) -> set[str]:
        todo, seen = list(names), set()
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(references(schemas[name]))
        return seen

    return close(requests), close(answers)


def references(value: Any) -> set[str]:
    """The schema names a JSON value refers to with ``$ref``, at any depth."""
    found: set[str] = set()
    if isinstance(value, list):
        for item in value:
            found |= references(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref" and isinstance(item, str):
                found.add(item.removeprefix(REF_PREFIX))
            else:
                found |= references(item)
    return found


def flatten(schema: dict[str, Any], schemas: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """An object schema's properties and required names, ``allOf`` parts merged."""
    if "$ref" in schema:
        return flatten(schemas[schema["$ref"].removeprefix(REF_PREFIX)], schemas)
    properties = dict(schema.get("properties", {}))
    required = set(schema.get("required", []))
    for part in schema.get("allOf", []):
        inner_properties, inner_required = flatten(part, schemas)
        properties.update(inner_properties)
        required |= inner_required
    return properties, required


def is_nullable(spec: dict[str, Any]) -> bool:
    kinds = spec.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    return any(is_nullable(part) for part in spec.get("oneOf", []) + spec.get("anyOf", []))


SCALARS: dict[str, type] = {"integer": int, "number": float, "string": str, "boolean": bool}


def scalar_of(spec: dict[str, Any]) -> type | None:
    """The Python type of a scalar property (of its items for an array), or None."""

    def kinds(schema: dict[str, Any]) -> list[str]:
        kind: Any = schema.get("type")
        return [k for k in (kind if isinstance(kind, list) else [kind]) if k != "null"]

    own = kinds(spec)
    found = kinds(spec.get("items", {})) if own == ["array"] else own
    return SCALARS.get(found[0]) if len(found) == 1 else None


def scalars_in(hint: Any) -> Iterator[type]:
    """The scalar types a type hint holds (through lists and unions)."""
    if hint in SCALARS.values():
        yield hint
    for arg in typing.get_args(hint):
        yield from scalars_in(arg)


def allows_none(hint: Any) -> bool:
    if hint is Any:
        return True
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def dataclasses_in(hint: Any) -> Iterator[type]:
    """The dataclasses a type hint holds (through lists, dicts and unions)."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        yield hint
    for arg in typing.get_args(hint):
        yield from dataclasses_in(arg)

// The hand-written wire types (src/wire.ts, and the problem document in src/errors.ts) checked
// against the service's OpenAPI document (openapi.json at the repository root, regenerated from
// the server and checked by the Rust tests). A field the server adds, renames or makes
// nullable fails here until the client knows it.
//
// Each exported interface is compared with the schema of the same name (SCHEMA_OF names the
// exceptions), read with the TypeScript compiler's parser: property names, `?`, `| null`, the
// interfaces a property refers to, and string-literal unions against the schema's `enum`. How
// strict each rule is depends on the direction the schema travels (from the document's paths):
// - every schema property is in the interface, unless IGNORED says why the client leaves it out;
//   no interface property is missing from the schema;
// - answers: `?` exactly when the schema does not require the field; `| null` wherever the
//   schema allows null;
// - requests: a field the schema requires is not optional; `| null` only where the schema
//   allows null;
// - a property whose schema is a string, number or boolean (or an array of one) is typed so;
// - a property whose schema refers to another schema refers to that schema's interface;
// - a string-literal union equals the schema's enum (null aside).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import ts from "typescript";

const repo = new URL("../../../../", import.meta.url);
const openapi = JSON.parse(readFileSync(new URL("openapi.json", repo), "utf8"));
const SOURCES = ["src/wire.ts", "src/errors.ts"];

/** Interfaces named differently from their schema. */
const SCHEMA_OF = {
  ProblemDocument: "Problem",
};

/** Exported interfaces of the scanned files that are no wire schema (none today). */
const CLIENT_ONLY = new Set([]);

/** Schema properties the client deliberately leaves out, each with its reason. */
const IGNORED = {
  // The access token names the tenant and the agent; the client never names others, which
  // the service refuses anyway.
  SubscribeRequest: ["tenant_id", "agent_id"],
  PollRequest: ["tenant_id", "recipient_id"],
  ClaimRequest: ["tenant_id", "recipient_id"],
  AcknowledgeRequest: ["tenant_id", "recipient_id"],
  ReleaseRequest: ["tenant_id", "recipient_id"],
  HeartbeatRequest: ["tenant_id", "recipient_id"],
  // Publishing with an agent token: the tenant is the token's.
  PublishRequest: ["tenant_id"],
};

test("every wire interface matches its schema in openapi.json", () => {
  const schemas = openapi.components.schemas;
  const { requests, answers } = directions(openapi);
  const interfaces = readInterfaces(SOURCES);
  const aliases = readStringUnions(SOURCES);
  const interfaceOf = new Map();
  for (const name of interfaces.keys()) {
    if (!CLIENT_ONLY.has(name)) interfaceOf.set(SCHEMA_OF[name] ?? name, name);
  }
  const problems = [];
  for (const [name, declared] of interfaces) {
    if (CLIENT_ONLY.has(name)) continue;
    const schemaName = SCHEMA_OF[name] ?? name;
    const raw = schemas[schemaName];
    if (raw === undefined) {
      problems.push(`${name}: no schema ${schemaName} in openapi.json (name it in SCHEMA_OF or CLIENT_ONLY)`);
      continue;
    }
    if (!requests.has(schemaName) && !answers.has(schemaName)) {
      problems.push(`${name}: schema ${schemaName} is in no request or answer of openapi.json`);
    }
    const schema = flatten(raw, schemas);
    const ignored = new Set(IGNORED[schemaName] ?? []);
    const where = name === schemaName ? name : `${name} (schema ${schemaName})`;
    for (const field of ignored) {
      if (!(field in schema.properties)) problems.push(`${where}: IGNORED names ${field}, which the schema no longer has`);
      if (declared.has(field)) problems.push(`${where}: IGNORED names ${field}, which the interface has`);
    }
    for (const field of Object.keys(schema.properties)) {
      if (!declared.has(field) && !ignored.has(field)) problems.push(`${where}: the schema has ${field}, the interface lacks it`);
    }
    for (const [field, property] of declared) {
      const spec = schema.properties[field];
      if (spec === undefined) {
        problems.push(`${where}: the interface has ${field}, the schema lacks it`);
        continue;
      }
      const required = schema.required.has(field);
      const nullable = isNullable(spec);
      const shape = describe(property.type, aliases);
      if (answers.has(schemaName)) {
        if (required && property.optional) problems.push(`${where}.${field}: always in the answer, but optional here`);
        if (!required && !property.optional) problems.push(`${where}.${field}: may be absent from the answer, but required here`);
        if (nullable && !shape.nullable) problems.push(`${where}.${field}: may be null in the answer, but not here`);
      }
      if (requests.has(schemaName)) {
        if (required && property.optional) problems.push(`${where}.${field}: the service requires it, but it is optional here`);
        if (shape.nullable && !nullable) problems.push(`${where}.${field}: the service refuses null, but it may be null here`);
      }
      const scalar = scalarOf(spec);
      if (scalar !== null && !shape.scalars.has(scalar)) {
        problems.push(`${where}.${field}: a ${scalar} in the schema, ${[...shape.scalars].join(" | ") || "no such type"} here`);
      }
      for (const target of references(spec)) {
        const expected = interfaceOf.get(target);
        if (expected === undefined) {
          problems.push(`${where}.${field}: refers to schema ${target}, which no interface stands for`);
        } else if (!shape.names.has(expected)) {
          problems.push(`${where}.${field}: should refer to ${expected} (schema ${target}), refers to ${[...shape.names].join(", ") || "none"}`);
        }
      }
      const values = enumOf(spec);
      if (shape.literals !== null && values !== null) {
        const want = [...values].sort().join(", ");
        const have = [...shape.literals].sort().join(", ");
        if (want !== have) problems.push(`${where}.${field}: values ${have}, the schema's ${want}`);
      }
    }
  }
  assert.deepEqual(problems, [], `wire types differ from openapi.json:\n  ${problems.join("\n  ")}`);
});

/** Schemas sent in request bodies and schemas in answers, with every schema they refer to. */
function directions(document) {
  const requests = new Set();
  const answers = new Set();
  for (const operations of Object.values(document.paths)) {
    for (const operation of Object.values(operations)) {
      if (typeof operation !== "object" || operation === null) continue;
      for (const name of references(operation.requestBody ?? {})) requests.add(name);
      for (const name of references(operation.responses ?? {})) answers.add(name);
    }
  }
  const close = (set) => {
    for (const name of set) for (const next of references(document.components.schemas[name])) set.add(next);
    return set;
  };
  return { requests: close(requests), answers: close(answers) };
}

/** The schema names a JSON value refers to with `$ref`, at any depth. */
function references(value, found = new Set()) {
  if (Array.isArray(value)) {
    for (const item of value) references(item, found);
  } else if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      if (key === "$ref" && typeof item === "string") found.add(item.replace("#/components/schemas/", ""));
      else references(item, found);
    }
  }
  return found;
}

/** An object schema's properties and required names, `allOf` parts merged. */
function flatten(schema, schemas) {
  if (schema.$ref !== undefined) return flatten(schemas[schema.$ref.replace("#/components/schemas/", "")], schemas);
  const properties = { ...(schema.properties ?? {}) };
  const required = new Set(schema.required ?? []);
  for (const part of schema.allOf ?? []) {
    const inner = flatten(part, schemas);
    Object.assign(properties, inner.properties);
    for (const name of inner.required) required.add(name);
  }
  return { properties, required };
}

function isNullable(spec) {
  const types = Array.isArray(spec.type) ? spec.type : [spec.type];
  return types.includes("null") || [...(spec.oneOf ?? []), ...(spec.anyOf ?? [])].some((part) => isNullable(part));
}

/** The TypeScript type of a scalar property (of its items for an array), or null. */
function scalarOf(spec) {
  const kinds = (schema) => (Array.isArray(schema.type) ? schema.type : [schema.type]).filter((kind) => kind !== "null");
  const [kind] = kinds(spec).length === 1 && kinds(spec)[0] === "array" ? kinds(spec.items ?? {}) : kinds(spec);
  return { integer: "number", number: "number", string: "string", boolean: "boolean" }[kind] ?? null;
}

/** A property's enum without null (of its items for an array), or null when it has none. */
function enumOf(spec) {
  const values = spec.enum ?? spec.items?.enum;
  return values === undefined ? null : new Set(values.filter((value) => value !== null));
}

/** Exported interfaces: name -> (property -> { optional, type node }). */
function readInterfaces(paths) {
  const found = new Map();
  for (const node of statements(paths)) {
    if (!ts.isInterfaceDeclaration(node) || !isExported(node)) continue;
    const properties = new Map();
    for (const member of node.members) {
      if (!ts.isPropertySignature(member)) continue; // index signatures: a problem's extensions
      properties.set(member.name.getText(), { optional: member.questionToken !== undefined, type: member.type });
    }
    found.set(node.name.text, properties);
  }
  return found;
}

/** Exported type aliases that are unions of string literals: name -> their values. */
function readStringUnions(paths) {
  const found = new Map();
  for (const node of statements(paths)) {
    if (!ts.isTypeAliasDeclaration(node) || !isExported(node)) continue;
    const values = stringLiterals(node.type);
    if (values !== null) found.set(node.name.text, values);
  }
  return found;
}

function statements(paths) {
  return paths.flatMap((path) => {
    const text = readFileSync(new URL(`../../${path}`, import.meta.url), "utf8");
    return [...ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true).statements];
  });
}

function isExported(node) {
  return (ts.getModifiers(node) ?? []).some((modifier) => modifier.kind === ts.SyntaxKind.ExportKeyword);
}

function stringLiterals(type) {
  const members = ts.isUnionTypeNode(type) ? type.types : [type];
  const values = new Set();
  for (const member of members) {
    if (!ts.isLiteralTypeNode(member) || !ts.isStringLiteral(member.literal)) return null;
    values.add(member.literal.text);
  }
  return values;
}

/**
 * What a property's type allows: null or not, the type names it mentions, the scalar types
 * (`string` for string literals too), and its string literals (inline or through an alias, of
 * its items for an array; null when it is no such union).
 */
function describe(type, aliases) {
  const names = new Set();
  let nullable = false;
  let literals = null;
  const scalars = new Set();
  const keywords = {
    [ts.SyntaxKind.StringKeyword]: "string",
    [ts.SyntaxKind.NumberKeyword]: "number",
    [ts.SyntaxKind.BooleanKeyword]: "boolean",
  };
  const visit = (node) => {
    if (ts.isParenthesizedTypeNode(node)) return visit(node.type);
    if (ts.isArrayTypeNode(node)) return visit(node.elementType);
    if (ts.isUnionTypeNode(node)) {
      const inline = stringLiterals(node);
      if (inline !== null) {
        literals = inline;
        scalars.add("string");
      } else node.types.forEach(visit);
      return;
    }
    if (ts.isLiteralTypeNode(node) && node.literal.kind === ts.SyntaxKind.NullKeyword) nullable = true;
    else if (ts.isLiteralTypeNode(node) && ts.isStringLiteral(node.literal)) {
      literals = new Set([node.literal.text]);
      scalars.add("string");
    } else if (ts.isTypeReferenceNode(node)) {
      const name = node.typeName.getText();
      names.add(name);
      if (aliases.has(name)) {
        literals = aliases.get(name);
        scalars.add("string");
      }
    } else if (keywords[node.kind] !== undefined) scalars.add(keywords[node.kind]);
  };
  visit(type);
  return { nullable, names, literals, scalars };
}

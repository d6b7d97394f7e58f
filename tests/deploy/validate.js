#!/usr/bin/env node
// validate.js: validates Kubernetes objects offline, the way the API server would with strict field
// validation (kubectl's default since 1.25), for tests/integration/test_deploy.py.
//
// Two checks per object, both from kubernetes-models (generated from the Kubernetes OpenAPI spec, and
// for the Prometheus Operator's PrometheusRule from its CRD):
//  1. the JSON schema (ajv): types, required fields, enums, quantity and int-or-string formats;
//  2. unknown fields: the schema lets any extra field through, so each object is also type-checked
//     as a TypeScript object literal against the package's interfaces, whose excess-property check
//     rejects a misspelled or misplaced field anywhere in the object.
//
// Usage: node validate.js < objects.json   (a JSON array of objects)
// Prints a JSON array with one {kind, name, errors: [...]} per object; an empty errors list means
// valid. Exit 0 when every object is valid, 1 when any is not, 2 on bad input.
"use strict";

const fs = require("fs");
const path = require("path");
const ts = require("typescript");

// Each package lays out one directory per API group version: v1, apps/v1, policy/v1... kubernetes-models
// has Kubernetes' own; @kubernetes-models/prometheus-operator the Prometheus Operator's custom
// resources (monitoring.coreos.com/v1: PrometheusRule).
const MODEL_PACKAGES = ["kubernetes-models", "@kubernetes-models/prometheus-operator"];

function modelPath(obj) {
  if (!obj || typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") return null;
  if (!/^[a-z0-9.]+(\/[a-z0-9]+)?$/.test(obj.apiVersion) || !/^[A-Za-z0-9]+$/.test(obj.kind)) return null;
  for (const pkg of MODEL_PACKAGES) {
    const rel = path.join(pkg, obj.apiVersion, obj.kind);
    try {
      require.resolve(rel);
      return rel;
    } catch (e) {
      // not in this package
    }
  }
  return null;
}

function schemaErrors(obj, rel) {
  const Model = require(rel)[obj.kind];
  try {
    new Model(obj).validate();
    return [];
  } catch (e) {
    // ajv's messages, joined by ", ": "data/spec/replicas must be integer, ..."
    return String(e.message)
      .split(/, (?=data[/ ])/)
      .map((m) => "schema: " + m);
  }
}

// Type-checks every object at once (one TypeScript program) and returns a list of errors per object.
function unknownFieldErrors(objs, rels) {
  const file = path.join(__dirname, "__objects__.ts");
  const starts = [];
  let text = "";
  objs.forEach((obj, i) => {
    if (!rels[i]) return;
    text += `import type { I${obj.kind} as T${i} } from ${JSON.stringify(rels[i])};\n`;
  });
  objs.forEach((obj, i) => {
    if (!rels[i]) return;
    starts.push([text.length, i]);
    text += `export const o${i}: T${i} = ${JSON.stringify(obj, null, 2)};\n`;
  });
  const options = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
    target: ts.ScriptTarget.ES2020,
    module: ts.ModuleKind.CommonJS,
    moduleResolution: ts.ModuleResolutionKind.Node10,
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  const fileExists = host.fileExists.bind(host);
  const readFile = host.readFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) =>
    path.resolve(name) === file ? ts.createSourceFile(name, text, lang) : getSourceFile(name, lang, ...rest);
  host.fileExists = (name) => path.resolve(name) === file || fileExists(name);
  host.readFile = (name) => (path.resolve(name) === file ? text : readFile(name));
  const program = ts.createProgram([file], options, host);
  const errors = objs.map(() => []);
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const msg = ts.flattenDiagnosticMessageText(d.messageText, " ");
    if (!d.file || path.resolve(d.file.fileName) !== file) {
      errors.forEach((e) => e.push("typescript: " + msg));
      continue;
    }
    let owner = starts[0][1];
    for (const [pos, i] of starts) if (pos <= d.start) owner = i;
    const { line } = d.file.getLineAndCharacterOfPosition(d.start);
    const src = text.split("\n")[line].trim();
    errors[owner].push(`fields: ${msg} (at: ${src})`);
  }
  return errors;
}

function main() {
  let objs;
  try {
    objs = JSON.parse(fs.readFileSync(0, "utf8"));
    if (!Array.isArray(objs)) throw new Error("expected a JSON array of objects");
  } catch (e) {
    process.stderr.write(`validate.js: ${e.message}\n`);
    process.exit(2);
  }
  const rels = objs.map(modelPath);
  const fields = rels.some(Boolean) ? unknownFieldErrors(objs, rels) : objs.map(() => []);
  const out = objs.map((obj, i) => {
    const name = (obj && obj.metadata && obj.metadata.name) || null;
    const kind = obj && obj.apiVersion && obj.kind ? `${obj.apiVersion}/${obj.kind}` : null;
    const errors = rels[i]
      ? schemaErrors(obj, rels[i]).concat(fields[i])
      : [`no schema for apiVersion ${obj && obj.apiVersion} kind ${obj && obj.kind}`];
    return { kind, name, errors };
  });
  process.stdout.write(JSON.stringify(out, null, 1) + "\n");
  process.exit(out.every((o) => o.errors.length === 0) ? 0 : 1);
}

main();

"""registry_double.py: a test double of Confluent's Schema Registry, written from its API reference
(https://docs.confluent.io/platform/current/schema-registry/develop/api.html): subjects, their
versions, global schema ids, the compatibility configuration of the registry and of each subject,
the compatibility check, and the errors a client meets (404 with 40401/40402/40403/40408, 409 with
40901 for an incompatible schema, 422 with 42201/42202/42203, 401). No registry server is packaged
for Debian or npm; this one keeps everything in memory.

Schemas are parsed and checked by Apache Avro's own Python library (Debian's python3-avro): a schema
it cannot parse is refused with 422, and compatibility is its ReaderWriterCompatibilityChecker under
the level in force (BACKWARD by default, as Confluent's): BACKWARD means the new schema reads data
written with the latest one, FORWARD the other way round, FULL both, *_TRANSITIVE against every
version, NONE no check. A schema the subject already has gets its id back without a new version;
the same schema in another subject gets the same id (ids are global, as in Confluent's).

Basic auth (username and password) and TLS (a certificate and key) are optional. Every request is
logged (method, path, status, time). For the tests: refuse(n, status, message) fails the next n
requests that register a schema, down() and up() make every request fail with 503.

    with RegistryDouble() as reg:        # reg.url, reg.requests, reg.subjects(), reg.schema(id)

Run as a program (python3 tests/registry_double.py --port 8081) it serves until killed: make bench
starts it so.
"""

import argparse
import base64
import json
import re
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import avro.compatibility
import avro.errors
import avro.schema

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")


class ApiError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def subject_not_found(subject):
    return ApiError(404, 40401, f"Subject '{subject}' not found.")


class Registry:
    """The registry's state and its rules, apart from HTTP."""

    def __init__(self):
        self.lock = threading.Lock()
        self.schemas = []            # id - 1 -> canonical schema text
        self.versions = {}           # subject -> [schema id of version 1, 2, ...]
        self.level = "BACKWARD"
        self.subject_level = {}      # subject -> level

    def _parse(self, text):
        try:
            return avro.schema.parse(text)
        except (avro.errors.AvroException, json.JSONDecodeError, TypeError, ValueError) as e:
            raise ApiError(422, 42201, f"Invalid schema {text[:200]}, details: {e}")

    def _canonical(self, text):
        """The form schemas are compared in: parsed by Avro, written back by it."""
        return json.dumps(self._parse(text).to_json(), sort_keys=True, separators=(",", ":"))

    def _versions(self, subject):
        if subject not in self.versions:
            raise subject_not_found(subject)
        return self.versions[subject]

    def _version_index(self, subject, version):
        vs = self._versions(subject)
        if version == "latest" or version == "-1":
            return len(vs) - 1
        if not re.fullmatch(r"\d+", str(version)) or int(version) < 1:
            raise ApiError(422, 42202, f"The specified version '{version}' is not a valid version id. "
                                       "Allowed values are between [1, 2^31-1] and the string \"latest\"")
        if int(version) > len(vs):
            raise ApiError(404, 40402, f"Version {version} not found.")
        return int(version) - 1

    def level_of(self, subject):
        return self.subject_level.get(subject, self.level)

    def incompatibilities(self, subject, text, against):
        """Why schema text does not evolve subject's versions against (indices) under its level."""
        level = self.level_of(subject)
        new = self._parse(text)
        checker = avro.compatibility.ReaderWriterCompatibilityChecker()
        why = []
        for i in against:
            old = self._parse(self.schemas[self.versions[subject][i] - 1])
            pairs = []
            if level.startswith(("BACKWARD", "FULL")):
                pairs.append(("reader", new, old))
            if level.startswith(("FORWARD", "FULL")):
                pairs.append(("writer", old, new))
            for _, reader, writer in pairs:
                r = checker.get_compatibility(reader, writer)
                if r.compatibility is not avro.compatibility.SchemaCompatibilityType.compatible:
                    # as Confluent's verbose messages: the reasons first, then the version compared
                    kinds = sorted(k.name.upper() for k in r.incompatibilities)
                    why += [f"{{errorType:'{kind}', description:'{msg}', additionalInfo:'{loc}'}}"
                            for kind, msg, loc in zip(kinds, sorted(r.messages), sorted(r.locations))]
                    why += [f"{{oldSchemaVersion: {i + 1}}}", f"{{oldSchema: '{self.schemas[self.versions[subject][i] - 1]}'}}",
                            f"{{compatibility: '{level}'}}"]
        return why

    def _against(self, subject):
        vs = self.versions.get(subject, [])
        level = self.level_of(subject)
        if level == "NONE" or not vs:
            return []
        return range(len(vs)) if level.endswith("TRANSITIVE") else [len(vs) - 1]

    def register(self, subject, text):
        with self.lock:
            canon = self._canonical(text)
            vs = self.versions.get(subject, [])
            for sid in vs:
                if self.schemas[sid - 1] == canon:
                    return sid
            why = self.incompatibilities(subject, text, self._against(subject))
            if why:
                raise ApiError(409, 40901, "Schema being registered is incompatible with an earlier schema "
                                           f"for subject \"{subject}\", details: [{', '.join(why)}]")
            if canon in self.schemas:
                sid = self.schemas.index(canon) + 1
            else:
                self.schemas.append(canon)
                sid = len(self.schemas)
            self.versions.setdefault(subject, []).append(sid)
            return sid

    def lookup(self, subject, text):
        with self.lock:
            canon = self._canonical(text)
            for i, sid in enumerate(self._versions(subject)):
                if self.schemas[sid - 1] == canon:
                    return {"subject": subject, "version": i + 1, "id": sid, "schema": canon}
            raise ApiError(404, 40403, "Schema not found")

    def version(self, subject, version):
        with self.lock:
            i = self._version_index(subject, version)
            sid = self.versions[subject][i]
            return {"subject": subject, "version": i + 1, "id": sid, "schema": self.schemas[sid - 1]}

    def schema(self, sid):
        with self.lock:
            if not (1 <= sid <= len(self.schemas)):
                raise ApiError(404, 40403, f"Schema {sid} not found")
            return self.schemas[sid - 1]

    def compatible(self, subject, version, text):
        with self.lock:
            if subject not in self.versions:
                return []
            i = self._version_index(subject, version)
            against = range(i + 1) if self.level_of(subject).endswith("TRANSITIVE") else [i]
            return [] if self.level_of(subject) == "NONE" else self.incompatibilities(subject, text, against)

    def set_level(self, subject, level):
        if level not in LEVELS:
            raise ApiError(422, 42203, f"Invalid compatibility level. Valid values are none, backward, "
                                       f"forward, full, backward_transitive, forward_transitive, and "
                                       f"full_transitive")
        with self.lock:
            if subject is None:
                self.level = level
            else:
                self.subject_level[subject] = level


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.server.double.requests.append(
            {"method": self.command, "path": self.path, "status": status, "time": time.time(),
             "body": self._body})

    def _error(self, e):
        self._send(e.status, {"error_code": e.code, "message": e.message})

    def _json_body(self):
        try:
            body = json.loads(self._body or "{}")
        except json.JSONDecodeError as e:
            raise ApiError(400, 400, f"Unrecognized body: {e}")
        if not isinstance(body, dict):
            raise ApiError(400, 400, "the body is not an object")
        return body

    def _schema_of(self, body):
        if body.get("schemaType", "AVRO") != "AVRO":
            raise ApiError(422, 42201, f"Invalid schema type {body['schemaType']}: this double knows AVRO")
        if not isinstance(body.get("schema"), str):
            raise ApiError(422, 42201, "Invalid schema: the field schema is missing or not a string")
        return body["schema"]

    def _authorized(self):
        d = self.server.double
        if d.username is None:
            return True
        want = "Basic " + base64.b64encode(f"{d.username}:{d.password}".encode()).decode()
        return self.headers.get("Authorization") == want

    def _handle(self):
        n = int(self.headers.get("Content-Length") or 0)
        self._body = self.rfile.read(n).decode() if n else None
        d = self.server.double
        if d.is_down:
            raise ApiError(503, 50003, "the registry is down (test double)")
        if not self._authorized():
            raise ApiError(401, 401, "Unauthorized")
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")] if url.path.strip("/") else []
        reg = d.registry
        m = self.command
        if m == "GET" and parts == []:
            return {}
        if m == "GET" and parts == ["subjects"]:
            return sorted(reg.versions)
        if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            if m == "GET":
                with reg.lock:
                    return list(range(1, len(reg._versions(parts[1])) + 1))
            if m == "POST":
                text = self._schema_of(self._json_body())
                if d.refusals:
                    status, message = d.refusals.pop(0)
                    raise ApiError(status, {409: 40901, 422: 42201}.get(status, 50001), message)
                return {"id": reg.register(parts[1], text)}
        if m == "GET" and len(parts) in (4, 5) and parts[0] == "subjects" and parts[2] == "versions":
            v = reg.version(parts[1], parts[3])
            if len(parts) == 5 and parts[4] == "schema":
                return json.loads(v["schema"])
            return v
        if m == "POST" and len(parts) == 2 and parts[0] == "subjects":
            return reg.lookup(parts[1], self._schema_of(self._json_body()))
        if m == "GET" and len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
            if not re.fullmatch(r"\d+", parts[2]):
                raise ApiError(404, 40403, f"Schema {parts[2]} not found")
            return {"schema": reg.schema(int(parts[2]))}
        if parts == ["config"]:
            if m == "GET":
                return {"compatibilityLevel": reg.level}
            if m == "PUT":
                level = str(self._json_body().get("compatibility", "")).upper()
                reg.set_level(None, level)
                return {"compatibility": level}
        if len(parts) == 2 and parts[0] == "config":
            if m == "GET":
                if parts[1] in reg.subject_level:
                    return {"compatibilityLevel": reg.subject_level[parts[1]]}
                if query.get("defaultToGlobal", ["false"])[0] == "true":
                    return {"compatibilityLevel": reg.level}
                raise ApiError(404, 40408, f"Subject '{parts[1]}' does not have subject-level compatibility "
                                           "configured")
            if m == "PUT":
                level = str(self._json_body().get("compatibility", "")).upper()
                reg.set_level(parts[1], level)
                return {"compatibility": level}
        if m == "POST" and len(parts) == 5 and parts[:2] == ["compatibility", "subjects"] and parts[3] == "versions":
            why = reg.compatible(parts[2], parts[4], self._schema_of(self._json_body()))
            out = {"is_compatible": not why}
            if query.get("verbose", ["false"])[0] == "true":
                out["messages"] = why
            return out
        raise ApiError(404, 404, f"HTTP 404 Not Found: {m} {url.path}")

    def _do(self):
        self._body = None
        try:
            self._send(200, self._handle())
        except ApiError as e:
            self._error(e)

    do_GET = do_POST = do_PUT = do_DELETE = _do


class RegistryDouble:
    """The double on 127.0.0.1 (a port of its own unless given), served by a thread."""

    def __init__(self, port=0, username=None, password=None, certfile=None, keyfile=None):
        self.registry = Registry()
        self.requests = []
        self.refusals = []
        self.is_down = False
        self.username, self.password = username, password
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.server.double = self
        scheme = "http"
        if certfile:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certfile, keyfile)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="registry", daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def refuse(self, count=1, status=409, message="Schema being registered is incompatible (test double)"):
        """The next count registrations fail with status and message."""
        self.refusals += [(status, message)] * count

    def down(self):
        self.is_down = True

    def up(self):
        self.is_down = False

    def subjects(self):
        with self.registry.lock:
            return {s: list(v) for s, v in self.registry.versions.items()}

    def schema(self, sid):
        return self.registry.schema(sid)

    def registrations(self):
        """The successful POST /subjects/S/versions requests: (subject, time, id)."""
        out = []
        for r in list(self.requests):
            m = re.fullmatch(r"/subjects/([^/?]+)/versions", r["path"].split("?")[0])
            if r["method"] == "POST" and m and r["status"] == 200:
                out.append((urllib.parse.unquote(m.group(1)), r["time"]))
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8081)
    args = ap.parse_args()
    reg = RegistryDouble(port=args.port)
    print(reg.url, flush=True)
    try:
        reg.thread.join()
    except KeyboardInterrupt:
        reg.close()


if __name__ == "__main__":
    main()

"""sasl_gateway.py: SASL in front of librdkafka's mock cluster, for tests. librdkafka 2.0.2's mock
brokers have no SASL (no SaslHandshake or SaslAuthenticate handler: they close the connection at
"unsupported SaslHandshakeRequest"), so this gateway answers those two requests itself, as Kafka's
protocol guide and KIP-43/KIP-152 describe them, and passes everything else through unchanged:

- one listener per mock broker, on 127.0.0.2 and the broker's own port (the mock binds 127.0.0.1
  only); the addresses in Metadata and FindCoordinator answers are rewritten to 127.0.0.2 (the
  same length), so that clients stay behind the gateway;
- ApiVersions answers are the mock's, with SaslHandshake (17) v0-1 and SaslAuthenticate (36) v0-1
  added; before authentication a client may send nothing else;
- SASL/PLAIN (RFC 4616) and SCRAM-SHA-256 (RFC 5802, RFC 7677: 4096 iterations); the password is
  read from --password-file at every authentication, so a test can change it; a wrong one is
  answered as a broker does (SASL_AUTHENTICATION_FAILED, 58, and the broker's message) and the
  connection is closed.

Usage: sasl_gateway.py --upstream 127.0.0.1:P1,127.0.0.1:P2 --user NAME --password-file FILE
  [--mechanisms PLAIN,SCRAM-SHA-256]. It prints "bootstrap=127.0.0.2:P1,..." once listening, one
  line per authentication on stderr ("auth ok user=NAME mechanism=M" or "auth failed ..."), and reads
  commands on stdin: "drop" closes every client connection (clients reconnect and authenticate
  again), answered "ok"; end of input stops it.
"""

import argparse
import base64
import hashlib
import hmac
import os
import secrets
import socket
import struct
import sys
import threading

API_METADATA, API_FIND_COORDINATOR, API_SASL_HANDSHAKE, API_API_VERSIONS, API_SASL_AUTHENTICATE = 3, 10, 17, 18, 36
REWRITTEN = {API_METADATA, API_FIND_COORDINATOR}
FRAME_MAX = 100 << 20
ERR_ILLEGAL_SASL_STATE, ERR_UNSUPPORTED_SASL_MECHANISM, ERR_SASL_AUTHENTICATION_FAILED = 34, 33, 58
SCRAM_ITERATIONS = 4096


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def recv_frame(s):
    (n,) = struct.unpack(">i", recv_exact(s, 4))
    if n < 0 or n > FRAME_MAX:
        raise ValueError(f"frame of {n} bytes")
    return recv_exact(s, n)


def frame(payload):
    return struct.pack(">i", len(payload)) + payload


def request_header(p):
    """(api_key, api_version, correlation_id, body offset) of a request (header v1: client_id)."""
    api_key, version, corr = struct.unpack(">hhi", p[:8])
    (n,) = struct.unpack(">h", p[8:10])
    return api_key, version, corr, 10 + max(n, 0)


def kstring(s):
    return struct.pack(">h", len(s)) + s if s is not None else struct.pack(">h", -1)


def uvarint(p, i):
    shift = v = 0
    while True:
        b = p[i]
        i += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, i
        shift += 7


def put_uvarint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def with_sasl_apis(resp, version):
    """The mock's ApiVersions answer with SaslHandshake and SaslAuthenticate (v0-1) listed."""
    corr, err = struct.unpack(">ih", resp[:6])
    if err:
        return resp
    i, keys = 6, []
    if version >= 3:
        n, i = uvarint(resp, i)
        for _ in range(n - 1):
            keys.append(struct.unpack(">hhh", resp[i:i + 6]))
            _, i = uvarint(resp, i + 6)  # the entry's tagged fields (none)
    else:
        (n,) = struct.unpack(">i", resp[i:i + 4])
        i += 4
        for _ in range(n):
            keys.append(struct.unpack(">hhh", resp[i:i + 6]))
            i += 6
    keys = [k for k in keys if k[0] not in (API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE)]
    keys += [(API_SASL_HANDSHAKE, 0, 1), (API_SASL_AUTHENTICATE, 0, 1)]
    out = struct.pack(">ih", corr, 0)
    if version >= 3:
        out += put_uvarint(len(keys) + 1) + b"".join(struct.pack(">hhh", *k) + b"\0" for k in keys)
    else:
        out += struct.pack(">i", len(keys)) + b"".join(struct.pack(">hhh", *k) for k in keys)
    return out + resp[i:]


class Scram:
    """The server side of SCRAM-SHA-256 for one exchange."""

    def __init__(self, user, password):
        self.user, self.password = user, password
        self.salt = secrets.token_bytes(16)
        self.first_bare = self.server_first = None

    def first(self, msg):
        """client-first-message -> (server-first-message, ok)."""
        parts = msg.split(",")
        if len(parts) < 4 or not parts[0] in ("n", "y") or not parts[2].startswith("n=") or not parts[3].startswith("r="):
            return b"", False
        self.first_bare = ",".join(parts[2:])
        self.client_user = parts[2][2:].replace("=2C", ",").replace("=3D", "=")
        self.nonce = parts[3][2:] + base64.b64encode(secrets.token_bytes(18)).decode()
        self.server_first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={SCRAM_ITERATIONS}"
        return self.server_first.encode(), True

    def final(self, msg):
        """client-final-message -> (server-final-message, ok)."""
        attrs = dict(a.split("=", 1) for a in msg.split(",") if "=" in a)
        without_proof = msg.rsplit(",p=", 1)[0]
        # Kafka's ScramSaslServer takes a nonce that ends with the server's: librdkafka before 2.10
        # (Debian 12 has 2.0.2) sends its client nonce once more in front of it (its issue #4895).
        if not attrs.get("r", "").endswith(self.nonce) or "p" not in attrs or self.client_user != self.user:
            return b"", False
        salted = hashlib.pbkdf2_hmac("sha256", self.password.encode(), self.salt, SCRAM_ITERATIONS)
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        stored_key = hashlib.sha256(client_key).digest()
        auth_message = f"{self.first_bare},{self.server_first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
        proof = base64.b64decode(attrs["p"])
        given_key = bytes(a ^ b for a, b in zip(proof, signature))
        if len(proof) != len(signature) or hashlib.sha256(given_key).digest() != stored_key:
            return b"", False
        server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
        return ("v=" + base64.b64encode(hmac.new(server_key, auth_message, hashlib.sha256).digest()).decode()).encode(), True


class Gateway:
    def __init__(self, upstreams, user, password_file, mechanisms):
        self.upstreams, self.user, self.password_file = upstreams, user, password_file
        self.mechanisms = mechanisms
        self.lock = threading.Lock()
        self.clients = set()
        self.listeners = []

    def password(self):
        with open(self.password_file) as f:
            return f.read().rstrip("\n")

    def log(self, line):
        print(line, file=sys.stderr, flush=True)

    def start(self):
        for host, port in self.upstreams:
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.2", port))
            ls.listen(64)
            self.listeners.append(ls)
            threading.Thread(target=self.accept, args=(ls, host, port), daemon=True).start()
        return ",".join(f"127.0.0.2:{port}" for _, port in self.upstreams)

    def accept(self, ls, host, port):
        while True:
            c, _ = ls.accept()
            threading.Thread(target=self.serve, args=(c, host, port), daemon=True).start()

    def drop(self):
        with self.lock:
            for c in list(self.clients):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve(self, c, host, port):
        with self.lock:
            self.clients.add(c)
        up = None
        try:
            up = socket.create_connection((host, port))
            if self.authenticate(c, up):
                self.pump(c, up)
        except (EOFError, OSError, ValueError, struct.error):
            pass
        finally:
            with self.lock:
                self.clients.discard(c)
            for s in (c, up):
                if s:
                    s.close()

    def authenticate(self, c, up):
        """Serves ApiVersions, SaslHandshake and SaslAuthenticate until the client is authenticated
        (True) or refused (False: the caller closes)."""
        mechanism = scram = None
        while True:
            req = recv_frame(c)
            api, version, corr, body = request_header(req)
            if api == API_API_VERSIONS:
                up.sendall(frame(req))
                c.sendall(frame(with_sasl_apis(recv_frame(up), version)))
            elif api == API_SASL_HANDSHAKE:
                (n,) = struct.unpack(">h", req[body:body + 2])
                asked = req[body + 2:body + 2 + n].decode()
                ok = asked in self.mechanisms
                mechanism = asked if ok else None
                c.sendall(frame(struct.pack(">ih", corr, 0 if ok else ERR_UNSUPPORTED_SASL_MECHANISM) +
                                struct.pack(">i", len(self.mechanisms)) +
                                b"".join(kstring(m.encode()) for m in self.mechanisms)))
                if not ok:
                    self.log(f"auth failed mechanism={asked}: not enabled")
                    return False
                scram = Scram(self.user, self.password()) if mechanism == "SCRAM-SHA-256" else None
            elif api == API_SASL_AUTHENTICATE and mechanism:
                (n,) = struct.unpack(">i", req[body:body + 4])
                token = req[body + 4:body + 4 + n]
                if mechanism == "PLAIN":
                    parts = token.split(b"\0")
                    ok = len(parts) == 3 and parts[1].decode() == self.user and parts[2].decode() == self.password()
                    reply, done = b"", ok
                    message = "Authentication failed: Invalid username or password"
                elif scram.first_bare is None:
                    reply, ok = scram.first(token.decode())
                    done = False
                    message = "Authentication failed during authentication due to invalid credentials with SASL " \
                              "mechanism SCRAM-SHA-256"
                else:
                    reply, ok = scram.final(token.decode())
                    done = ok
                    message = "Authentication failed during authentication due to invalid credentials with SASL " \
                              "mechanism SCRAM-SHA-256"
                out = struct.pack(">ih", corr, 0 if ok else ERR_SASL_AUTHENTICATION_FAILED)
                out += kstring(None if ok else message.encode()) + struct.pack(">i", len(reply)) + reply
                if version >= 1:
                    out += struct.pack(">q", 0)
                c.sendall(frame(out))
                if not ok:
                    self.log(f"auth failed user={self.user} mechanism={mechanism}")
                    return False
                if done:
                    self.log(f"auth ok user={self.user} mechanism={mechanism}")
                    return True
            else:  # a broker refuses anything else before authentication
                self.log(f"refused api_key={api} before authentication")
                return False

    def pump(self, c, up):
        """Frames both ways; the brokers' addresses in Metadata and FindCoordinator answers become
        127.0.0.2's (responses come in request order on a connection)."""
        pending = []
        cond = threading.Condition()

        def client_to_broker():
            try:
                while True:
                    req = recv_frame(c)
                    api, _, corr, _ = request_header(req)
                    with cond:
                        pending.append((corr, api))
                    up.sendall(frame(req))
            except (EOFError, OSError, ValueError, struct.error):
                for s in (c, up):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=client_to_broker, daemon=True).start()
        while True:
            resp = recv_frame(up)
            (corr,) = struct.unpack(">i", resp[:4])
            with cond:
                api = next((a for k, a in pending if k == corr), None)
                pending[:] = [(k, a) for k, a in pending if k != corr]
            if api in REWRITTEN:
                resp = resp.replace(b"127.0.0.1", b"127.0.0.2")
            c.sendall(frame(resp))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--mechanisms", default="PLAIN,SCRAM-SHA-256")
    a = ap.parse_args()
    upstreams = []
    for hp in a.upstream.split(","):
        host, port = hp.rsplit(":", 1)
        upstreams.append((host, int(port)))
    g = Gateway(upstreams, a.user, a.password_file, a.mechanisms.split(","))
    print("bootstrap=" + g.start(), flush=True)
    for line in sys.stdin:
        if line.strip() == "drop":
            g.drop()
            print("ok", flush=True)
        else:
            print(f"unknown command {line.strip()!r}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()

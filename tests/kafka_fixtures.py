"""kafka_fixtures.py: pytest fixtures and helpers for the Kafka sink's tests: a mock Kafka cluster
(build/tests/kafka_mock, librdkafka's mock brokers in a process of their own), the protobuf
classes of proto/cdc/v1/event.proto, a consumer that reads topics from the beginning and decodes
what it reads, and kcat as a second, non-Python client.

Fixtures (conftest.py imports them):
  kafka_mock    session-scoped KafkaMock: .bootstrap, .command("down 1"), down/up/all_down/all_up,
                push_errors, push_broker_errors, pending_errors, create_topic, set_coordinator,
                set_rtt. Started once, stopped at the end of the session.
  kafka         the same KafkaMock for one test, put back afterwards (every broker up, queued
                errors cleared, no added latency) so a test's outage never leaks into the next.
  proto         event_pb2, compiled from proto/cdc/v1/event.proto by cdc_client (once a process)
  kafka_reader  a factory: kafka_reader(topics, transactions_topic=None, group=True) returns a
                running KafkaReader; every reader is closed when the test ends.
  kafka_sasl    a factory: kafka_sasl(user, password_file) starts tests/kafka/sasl_gateway.py in front
                of the mock (SASL/PLAIN and SCRAM-SHA-256, which librdkafka 2.0.2's mock lacks):
                .bootstrap, .drop() (closes its clients' connections), .log(); stopped at the end.

Waiting is polling against a deadline. The mock binary is $KAFKA_MOCK_BIN, else
build/tests/kafka_mock at the repository root.
"""

import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest

from subscriber_helpers import protos

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAFKA_MOCK_BIN = os.environ.get("KAFKA_MOCK_BIN", os.path.join(ROOT, "build", "tests", "kafka_mock"))

CONTENT_TYPE_EVENT = "application/x-protobuf; messageType=cdc.v1.Event"
CONTENT_TYPE_TXN = "application/x-protobuf; messageType=cdc.v1.Transaction"

# Kafka protocol numbers the tests use.
API_PRODUCE = 0

__all__ = ["kafka_mock", "kafka", "proto", "kafka_reader", "kafka_sasl"]
SASL_GATEWAY = os.path.join(ROOT, "tests", "kafka", "sasl_gateway.py")


# --- the mock cluster ---------------------------------------------------------------------------

class KafkaMock:
    """One kafka_mock process: its bootstrap servers, and its command channel (one line in, one
    answer line out)."""

    def __init__(self, binary=KAFKA_MOCK_BIN, brokers=3, timeout=10.0):
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise RuntimeError(f"{binary} not built (run make {os.path.relpath(binary, ROOT)})")
        self.brokers = brokers
        self._err = open(os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                      f"kafka_mock.{os.getpid()}.{uuid.uuid4().hex[:8]}.stderr"), "w+b")
        self.proc = subprocess.Popen([binary, "--brokers", str(brokers)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err)
        self._buf = b""
        self._lock = threading.Lock()
        first = self._readline(timeout)
        if not first.startswith("bootstrap="):
            self.close()
            raise RuntimeError(f"kafka_mock: unexpected first line {first!r}\n{self.stderr()}")
        self.bootstrap = first[len("bootstrap="):]
        self.api_keys_with_errors = set()

    def stderr(self):
        self._err.flush()
        self._err.seek(0)
        return self._err.read().decode(errors="replace")

    def _readline(self, timeout):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"kafka_mock: no answer within {timeout}s\n{self.stderr()}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise AssertionError(f"kafka_mock exited ({self.proc.poll()})\n{self.stderr()}")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def command(self, line, timeout=10.0):
        """Sends one command; returns the answer ("ok" or "ok VALUE"), raises AssertionError with
        the mock's answer otherwise."""
        with self._lock:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
            answer = self._readline(timeout)
        if answer != "ok" and not answer.startswith("ok "):
            raise AssertionError(f"kafka_mock {line!r}: {answer}")
        return answer

    def down(self, broker):
        return self.command(f"down {broker}")

    def up(self, broker):
        return self.command(f"up {broker}")

    def all_down(self):
        return self.command("alldown")

    def all_up(self):
        return self.command("allup")

    def push_errors(self, error, count, api_key=API_PRODUCE):
        """The next count requests of api_key fail with error (a number or a name such as
        REQUEST_TIMED_OUT), on whichever broker gets them; not on a broker that ever had
        push_broker_errors for api_key (a quirk of librdkafka's mock), so the session's tests use
        push_broker_errors, which can also be waited for (pending_errors)."""
        self.api_keys_with_errors.add(api_key)
        return self.command(f"error {api_key} {error} {count}")

    def clear_errors(self, api_key=API_PRODUCE):
        return self.command(f"clear {api_key}")

    def push_broker_errors(self, broker, error, count, api_key=API_PRODUCE, late_ms=0):
        """The next count requests of api_key to this broker fail with error (NO_ERROR: succeed),
        answered late_ms late."""
        self.api_keys_with_errors.add(api_key)
        return self.command(f"brokererror {broker} {api_key} {error} {count} {late_ms}")

    def pending_errors(self, broker, api_key=API_PRODUCE):
        """How many errors of push_broker_errors this broker has not served yet."""
        return int(self.command(f"pending {broker} {api_key}").split()[1])

    def set_rtt(self, ms, broker=-1):
        return self.command(f"rtt {broker} {ms}")

    def create_topic(self, name, partitions, exist_ok=False):
        try:
            return self.command(f"topic {name} {partitions}")
        except AssertionError as e:
            if not exist_ok or "TOPIC_ALREADY_EXISTS" not in str(e):
                raise

    def set_coordinator(self, broker, transactional_id):
        """Makes broker the transaction coordinator of transactional_id."""
        return self.command(f"coordinator {broker} {transactional_id}")

    def set_leader(self, topic, partition, broker):
        """Makes broker the leader of partition of topic (which exists)."""
        return self.command(f"leader {topic} {partition} {broker}")

    def leaders(self, topics, timeout=10.0):
        """The ids of the brokers that lead a partition of one of topics (from the metadata)."""
        from confluent_kafka.admin import AdminClient
        md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=timeout)
        out = set()
        for t in topics:
            tm = md.topics.get(t)
            assert tm is not None and tm.error is None, f"topic {t} not in the metadata: {tm}"
            out |= {p.leader for p in tm.partitions.values()}
        return out

    def reset(self):
        """Every broker up, queued errors dropped, no added latency. A broker's own errors cannot
        be dropped (librdkafka has no call for it): a test must wait until they are served."""
        self.all_up()
        left = {}
        for k in sorted(self.api_keys_with_errors):
            self.clear_errors(k)
            for b in range(1, self.brokers + 1):
                if self.pending_errors(b, k):
                    left[(b, k)] = self.pending_errors(b, k)
        self.api_keys_with_errors.clear()
        self.set_rtt(0)
        assert not left, f"kafka_mock: broker errors (broker, api key): count still queued: {left}"

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        self._err.close()
        try:
            os.unlink(self._err.name)
        except OSError:
            pass


# --- protobuf -----------------------------------------------------------------------------------

def lsn_text(v):
    """PostgreSQL's text form of an LSN: "X/X", upper-case hex."""
    return f"{v >> 32:X}/{v & 0xFFFFFFFF:X}"


class _UnchangedToast:
    def __repr__(self):
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _UnchangedToast()


def typed_value(v):
    """(member name, Python value) of a cdc.v1.Value: ("int_value", 7), ("null_value", None),
    ("uuid_value", "…canonical…"), ("timestamp_value", (micros, with_zone)),
    ("other_value", (type_name, text)), ("unchanged_toast", UNCHANGED_TOAST)."""
    kind = v.WhichOneof("kind")
    if kind is None:
        raise AssertionError(f"a Value with no member set: {v}")
    if kind == "null_value":
        return kind, None
    if kind == "unchanged_toast":
        return kind, UNCHANGED_TOAST
    if kind == "uuid_value":
        return kind, str(uuid.UUID(bytes=v.uuid_value))
    if kind == "timestamp_value":
        return kind, (v.timestamp_value.micros, v.timestamp_value.with_zone)
    if kind == "other_value":
        return kind, (v.other_value.type_name, v.other_value.text)
    return kind, getattr(v, kind)


def row_typed(row):
    """{column name: (type_oid, member name, value)} of a cdc.v1.Row (or Key)."""
    out = {}
    for c in row.columns:
        assert c.name not in out, f"column {c.name} twice in {row}"
        out[c.name] = (c.type_oid,) + typed_value(c.value)
    return out


def row_plain(row):
    """{column name: Python value} of a cdc.v1.Row (or Key)."""
    return {name: t[2] for name, t in row_typed(row).items()}


# --- consuming ----------------------------------------------------------------------------------

class KafkaMessage:
    """One consumed record; decodes lazily so that a decoding error fails the test that looks."""

    def __init__(self, msg, pb, transactions_topic):
        self.topic = msg.topic()
        self.partition = msg.partition()
        self.offset = msg.offset()
        self.key = msg.key()
        self.value = msg.value()
        self.timestamp = msg.timestamp()[1]  # ms: the producer's create time
        self.headers = [(k, v.decode() if v is not None else None) for k, v in (msg.headers() or [])]
        self._pb = pb
        self._is_txn = transactions_topic is not None and self.topic == transactions_topic

    @property
    def is_tombstone(self):
        return self.value is None

    def header(self, name):
        """The value of header name; fails if it is missing or given twice."""
        vals = [v for k, v in self.headers if k == name]
        assert len(vals) == 1, f"header {name!r} {len(vals)} times in {self.headers} ({self.where()})"
        return vals[0]

    def header_names(self):
        return [k for k, _ in self.headers]

    @property
    def event(self):
        """The decoded cdc.v1.Event (None for a tombstone)."""
        assert not self._is_txn, f"a transaction record has no Event ({self.where()})"
        return None if self.value is None else self._pb.Event.FromString(self.value)

    @property
    def key_pb(self):
        """The decoded cdc.v1.Key."""
        assert not self._is_txn and self.key is not None, f"no Key on {self.where()}"
        return self._pb.Key.FromString(self.key)

    @property
    def txn(self):
        """The decoded cdc.v1.Transaction of a transactions_topic record."""
        assert self._is_txn, f"not a transaction record ({self.where()})"
        return self._pb.Transaction.FromString(self.value)

    def where(self):
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def __repr__(self):
        return f"<KafkaMessage {self.where()} key={self.key!r} value={len(self.value or b'')}B>"


class KafkaReader:
    """Reads every message of topics from the beginning, in a thread of its own, into .messages
    (consumption order: per partition, offset order). With group=True the consumer joins a fresh
    consumer group (subscribe, auto.offset.reset=earliest); the mock's group coordinator waits 3s
    before the first assignment, so start the reader early. With group=False it assigns every
    partition explicitly once the topic exists (no group join). log_level 0 keeps librdkafka's log
    lines (a broker refusing connections while it is down on purpose, say) out of stderr; errors
    still reach .errors.

    A group consumer refreshes no metadata on a timer. librdkafka 2.0.2's group leader, between
    its JoinGroup answer and the metadata it asked for to assign partitions, takes any other
    metadata answer for a change of subscription and joins again instead of syncing; the mock
    answers that second join only after session.timeout.ms - 1 s (44 s). A 1 s refresh ran into
    that window whenever the third refresh came a few milliseconds after the mock's 3 s join
    delay (a loaded machine): the reader then saw nothing for 44 s. The mock creates a
    subscribed topic at the consumer's first metadata request, so no refresh is needed to find
    it."""

    def __init__(self, bootstrap, topics, pb, transactions_topic=None, group=True, log_level=3):
        from confluent_kafka import Consumer
        self.topics = list(topics)
        self._pb = pb
        self._txn_topic = transactions_topic
        self.errors = []
        self.messages = []
        self.assigned = None  # [(topic, partition)] once the group (or the reader) assigned them
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._group = group
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"cdc-test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # group=False: topics created after the reader started, leaders after an outage
            "topic.metadata.refresh.interval.ms": -1 if group else 1000,
            "reconnect.backoff.max.ms": 1000,              # back soon after a broker outage
            "fetch.wait.max.ms": 50,
            "isolation.level": "read_committed",  # librdkafka's default, said out loud
            "log_level": log_level,
            "error_cb": self.errors.append,
        })
        if group:
            self._consumer.subscribe(self.topics, on_assign=self._on_assign)
        self._thread = threading.Thread(target=self._run, name="kafka-reader", daemon=True)
        self._thread.start()

    def _assign_when_present(self):
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
        parts = []
        for t in self.topics:
            md = self._consumer.list_topics(t, timeout=2).topics.get(t)
            if md is None or md.error is not None or not md.partitions:
                return False
            parts += [TopicPartition(t, p, OFFSET_BEGINNING) for p in sorted(md.partitions)]
        self._consumer.assign(parts)
        self._on_assign(self._consumer, parts)
        return True

    def _on_assign(self, consumer, parts):
        self.assigned = sorted((p.topic, p.partition) for p in parts)

    def _state(self):
        """For failure messages: what the consumer reads, and its errors."""
        if self.assigned is None:
            where = "no partitions assigned yet" + (" (group join not complete)" if self._group else "")
        else:
            where = f"assigned {self.assigned}"
        return f"{where}; consumer errors {self.errors[-5:]}"

    def _run(self):
        assigned = self._group
        while not self._stop.is_set():
            if not assigned:
                try:
                    assigned = self._assign_when_present()
                except Exception as e:  # KafkaException while brokers are unreachable
                    self.errors.append(e)
                if not assigned:
                    self._stop.wait(0.2)
                    continue
            msg = self._consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                self.errors.append(msg.error())  # e.g. a topic not there yet: keep polling
                continue
            m = KafkaMessage(msg, self._pb, self._txn_topic)
            with self._cond:
                self.messages.append(m)
                self._cond.notify_all()

    def snapshot(self, pred=None):
        with self._cond:
            msgs = list(self.messages)
        return [m for m in msgs if pred(m)] if pred else msgs

    def wait(self, n, timeout=30.0, pred=None, what=None, describe=None):
        """Waits until at least n messages (matching pred) were read; returns them all (matching
        pred). describe(): extra text for the failure message (say, cdc's stderr tail)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                sel = [m for m in self.messages if pred(m)] if pred else list(self.messages)
                if len(sel) >= n:
                    return sel
                left = deadline - time.monotonic()
                if left <= 0:
                    extra = ("\n" + describe()) if describe else ""
                    raise AssertionError(
                        f"timed out after {timeout}s with {len(sel)} of {n} messages "
                        f"{what or ''} on {self.topics}; {self._state()}{extra}")
                self._cond.wait(min(left, 0.2))

    def wait_until(self, cond, timeout=30.0, what="condition", describe=None):
        """Polls cond(messages) against a deadline; returns its truthy result."""
        deadline = time.monotonic() + timeout
        while True:
            v = cond(self.snapshot())
            if v:
                return v
            if time.monotonic() >= deadline:
                extra = ("\n" + describe()) if describe else ""
                raise AssertionError(f"timed out after {timeout}s waiting for {what} on {self.topics} "
                                     f"({len(self.snapshot())} messages; {self._state()}){extra}")
            time.sleep(0.1)

    def close(self):
        self._stop.set()
        self._thread.join(10)
        try:
            self._consumer.close()
        except Exception:
            pass


# --- kcat ---------------------------------------------------------------------------------------

KCAT_FORMAT = "%t\t%p\t%o\t%K\t%S\t%h\n%k%s\n"


def kcat(bootstrap, topic, timeout=30.0):
    """Every message of topic, read by kcat (-C -o beginning -e) in a format with exact key and
    payload lengths: [{"topic", "partition", "offset", "key", "value", "headers"}], key/value bytes
    or None, headers a list of (name, value) pairs."""
    r = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                        "-f", KCAT_FORMAT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"kcat exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    out, pos, msgs = r.stdout, 0, []
    while pos < len(out):
        nl = out.index(b"\n", pos)
        t, p, o, klen, vlen, hdrs = out[pos:nl].decode().split("\t", 5)
        pos = nl + 1
        klen, vlen = int(klen), int(vlen)
        key = out[pos:pos + klen] if klen >= 0 else None
        pos += max(klen, 0)
        value = out[pos:pos + vlen] if vlen >= 0 else None
        pos += max(vlen, 0)
        assert out[pos:pos + 1] == b"\n", f"kcat output out of step at byte {pos}"
        pos += 1
        headers = [tuple(h.split("=", 1)) for h in hdrs.split(",")] if hdrs else []
        msgs.append({"topic": t, "partition": int(p), "offset": int(o), "key": key, "value": value,
                     "headers": headers})
    return msgs


# --- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def kafka_mock():
    m = KafkaMock()
    yield m
    m.close()


@pytest.fixture
def kafka(kafka_mock):
    kafka_mock.reset()
    yield kafka_mock
    if kafka_mock.proc.poll() is None:
        kafka_mock.reset()


@pytest.fixture(scope="session")
def proto():
    # One compile per process, shared with the subscriber client: protobuf's descriptor pool takes
    # each .proto file once.
    return protos()[0]


class SaslGateway:
    """tests/kafka/sasl_gateway.py in front of the mock: SASL/PLAIN and SCRAM-SHA-256 for user, the
    password read from password_file at every authentication."""

    def __init__(self, mock, user, password_file):
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, SASL_GATEWAY, "--upstream", mock.bootstrap, "--user", user,
                                      "--password-file", password_file], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err, text=True)
        first = self.proc.stdout.readline().strip()
        if not first.startswith("bootstrap="):
            self.close()
            raise RuntimeError(f"sasl_gateway: unexpected first line {first!r}\n{self.log()}")
        self.bootstrap = first[len("bootstrap="):]

    def log(self):
        """What it said: one line per authentication ("auth ok user=U mechanism=M", "auth failed ...")."""
        self._err.seek(0)
        return self._err.read().decode(errors="replace")

    def drop(self):
        """Closes its clients' connections: they connect and authenticate again."""
        self.proc.stdin.write("drop\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._err.close()


@pytest.fixture
def kafka_sasl(kafka):
    gateways = []

    def make(user, password_file):
        g = SaslGateway(kafka, user, password_file)
        gateways.append(g)
        return g

    yield make
    for g in gateways:
        g.close()


@pytest.fixture
def kafka_reader(kafka_mock, proto):
    readers = []

    def make(topics, transactions_topic=None, group=True):
        r = KafkaReader(kafka_mock.bootstrap, topics, proto, transactions_topic=transactions_topic,
                        group=group)
        readers.append(r)
        return r

    yield make
    for r in readers:
        r.close()

"""probe_transactions.py: what librdkafka 2.0.2's mock cluster (build/tests/kafka_mock, a process of
its own on 127.0.0.1) supports of Kafka transactions, probed with a client that is not cdc's code
(confluent_kafka 1.7.0 on librdkafka 2.0.2). Research for issue 17 (kafka.exactly_once); no cdc
involved.

    make -s all build/tests/kafka_mock && /usr/bin/python3 tests/kafka/probe_transactions.py [-v]

Prints one PASS / FAIL / INFO line per check, with what was seen. A FAIL marked "needed" is a
capability the exactly-once verification (read-committed consumer, fencing of a resumed old
producer) needs from the broker; the script exits 1 if any of those is missing, 0 otherwise. The
whole run is bounded (SIGALRM, RUN_LIMIT seconds); each check starts a mock of its own so that
injected errors and producer ids never leak from one check into the next.
"""

import json
import os
import signal
import sys
import time
import traceback
import uuid
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException,  # noqa: E402
                             Producer, TopicPartition, libversion, version)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402
from kafka_fixtures import KafkaMock  # noqa: E402

RUN_LIMIT = 300  # seconds for the whole probe
BROKERS = 3
VERBOSE = "-v" in sys.argv[1:]

# Kafka protocol api keys (for the mock's "error APIKEY ERR COUNT" command).
API_PRODUCE = 0
API_INIT_PRODUCER_ID = 22
API_ADD_PARTITIONS_TO_TXN = 24
API_END_TXN = 26

results = []  # (status, name, needed, detail)


def report(ok, name, detail, needed):
    """ok: True (PASS), False (FAIL) or None (INFO: a fact, no verdict)."""
    status = "INFO" if ok is None else ("PASS" if ok else "FAIL")
    results.append((status, name, needed, detail))
    tag = " (needed)" if needed and ok is False else ""
    print(f"{status} {name}{tag}: {detail}", flush=True)


def log(*a):
    if VERBOSE:
        print("   ", *a, flush=True)


def new_tid():
    return f"cdc-probe-{uuid.uuid4().hex[:8]}"


class TxnProducer(Producer):
    """A Producer that keeps what its error_cb was given in .errors."""


def txn_producer(mock, tid, **extra):
    errors = []
    conf = {"bootstrap.servers": mock.bootstrap, "transactional.id": tid, "linger.ms": 5,
            "log_level": 0, "error_cb": errors.append}
    conf.update(extra)
    p = TxnProducer(conf)
    p.errors = errors
    return p


def plain_producer(mock):
    return Producer({"bootstrap.servers": mock.bootstrap, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 5, "log_level": 0})


def produce_all(p, topic, values, partition=0, key=None):
    """Produces values to topic[partition] and waits for every delivery report: returns the
    errors (delivery reports, and produce() or flush() raising: a transactional producer refuses
    new messages once its transaction needs an abort, and flush() raises its fatal error), empty
    when the broker appended them all."""
    errs = []

    def dr(err, msg):
        if err is not None:
            errs.append(f"delivery: {err.name()}")

    try:
        for v in values:
            p.produce(topic, v.encode(), key=key.encode() if key else None, partition=partition,
                      on_delivery=dr)
        left = p.flush(15)
        if left:
            errs.append(f"{left} messages still in flight after 15s")
    except KafkaException as e:
        errs.append(f"{'produce' if 'produce message' in str(e) else 'flush'} raised {kerr(e)}")
        p.flush(15)
    return errs


def read(mock, topic, isolation, partitions=(0,), timeout=8.0, start=OFFSET_BEGINNING, stats=None):
    """Every message of topic's partitions from start to the end the broker reports (partition
    EOF), read by a fresh consumer with isolation.level=isolation: [(partition, offset, value)].
    stats: a list that receives the consumer's statistics (JSON, parsed) while it reads."""
    conf = {"bootstrap.servers": mock.bootstrap, "group.id": f"probe-{uuid.uuid4().hex}",
            "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False,
            "fetch.wait.max.ms": 50, "log_level": 0}
    if stats is not None:
        conf["statistics.interval.ms"] = 100
        conf["stats_cb"] = lambda s: stats.append(json.loads(s))
    c = Consumer(conf)
    try:
        c.assign([TopicPartition(topic, p, start) for p in partitions])
        out, eof, deadline = [], set(), time.monotonic() + timeout
        while time.monotonic() < deadline and len(eof) < len(partitions):
            m = c.poll(0.1)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                else:
                    log("consumer error", m.error())
                continue
            eof.discard(m.partition())
            out.append((m.partition(), m.offset(), m.value().decode()))
        if stats is not None:  # one more statistics round after the end of the partitions
            end = time.monotonic() + 0.3
            while time.monotonic() < end:
                c.poll(0.05)
        return out
    finally:
        c.close()


def values(msgs):
    return [v for _, _, v in msgs]


def kerr(e):
    """(code name, fatal, retriable, txn_requires_abort) of a KafkaException, as text."""
    ke = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    if ke is None:
        return repr(e)
    return (f"{ke.name()} fatal={ke.fatal()} retriable={ke.retriable()} "
            f"txn_requires_abort={ke.txn_requires_abort()} ({ke.str()})")


def kerr_obj(e):
    return e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None


def with_mock(fn):
    """Runs fn(mock) on a fresh mock; an exception is a FAIL of that check, not of the probe."""
    mock = KafkaMock(brokers=BROKERS)
    try:
        fn(mock)
    except Exception as e:  # noqa: BLE001: report and go on with the next check
        report(False, fn.__name__, f"probe raised {type(e).__name__}: {e}\n{traceback.format_exc()}",
               True)
    finally:
        mock.close()


# --- 1. commit ------------------------------------------------------------------------------------

def check_commit(mock):
    mock.create_topic("t1", 1)
    p = txn_producer(mock, new_tid())
    p.init_transactions(10)
    p.begin_transaction()
    errs = produce_all(p, "t1", [f"c{i}" for i in range(5)])
    p.commit_transaction(10)
    rc = values(read(mock, "t1", "read_committed"))
    report(not errs and rc == [f"c{i}" for i in range(5)], "1 commit visible to read_committed",
           f"delivery errors {errs}; read_committed read {rc}", True)


# --- 2. abort -------------------------------------------------------------------------------------

def check_abort(mock):
    mock.create_topic("t2", 1)
    p = txn_producer(mock, new_tid())
    p.init_transactions(10)
    p.begin_transaction()
    e1 = produce_all(p, "t2", ["aborted-0", "aborted-1", "aborted-2"])  # on the broker, then abort
    p.abort_transaction(10)
    p.begin_transaction()
    e2 = produce_all(p, "t2", ["kept-0", "kept-1"])
    p.commit_transaction(10)
    rc = read(mock, "t2", "read_committed")
    ru = read(mock, "t2", "read_uncommitted")
    report(bool(ru) and not any(v.startswith("aborted") for v in values(rc)) and
           values(rc) == ["kept-0", "kept-1"],
           "2 aborted records hidden from read_committed",
           f"delivery errors {e1 + e2}; read_committed read {rc}", True)
    report(any(v.startswith("aborted") for v in values(ru)), "2b aborted records seen by read_uncommitted",
           f"read_uncommitted read {values(ru)}", False)
    offs = [o for _, o, _ in ru]
    # A real broker writes one control record (ABORT / COMMIT marker) per partition per transaction:
    # offsets 3 (abort marker) and 6 (commit marker) would be missing and the high watermark would be 7.
    lo, hi = Consumer({"bootstrap.servers": mock.bootstrap, "group.id": "probe-wm", "log_level": 0}) \
        .get_watermark_offsets(TopicPartition("t2", 0), timeout=5)
    report(None, "2c transaction markers",
           f"offsets of the 5 data records {offs}, watermarks ({lo}, {hi}): "
           + ("contiguous, no control records written by EndTxn" if offs == list(range(5)) and hi == 5
              else "gaps: control records present"), False)


# --- 3. open transaction / LSO --------------------------------------------------------------------

def lso_of(stats, topic, part):
    for s in reversed(stats):
        pt = s.get("topics", {}).get(topic, {}).get("partitions", {}).get(str(part))
        if pt and pt.get("ls_offset", -1001) >= 0:
            return pt["ls_offset"], pt.get("hi_offset")
    return None, None


def check_open_txn(mock):
    mock.create_topic("t3", 1)
    a = txn_producer(mock, new_tid())
    a.init_transactions(10)
    a.begin_transaction()
    e1 = produce_all(a, "t3", ["open-0", "open-1"])  # appended, transaction left open
    b = plain_producer(mock)
    e2 = produce_all(b, "t3", ["plain-after-open"])  # a committed record behind the open one
    stats = []
    rc = read(mock, "t3", "read_committed", stats=stats)
    lso, hwm = lso_of(stats, "t3", 0)
    report(values(rc) == [], "3 read_committed stops at the LSO of an open transaction",
           f"delivery errors {e1 + e2}; with the transaction open read_committed read {values(rc)}; "
           f"consumer stats ls_offset={lso} hi_offset={hwm} (a real broker: LSO 0, HWM 3)", True)
    a.commit_transaction(10)
    rc2 = read(mock, "t3", "read_committed")
    report(values(rc2) == ["open-0", "open-1", "plain-after-open"], "3b after commit read_committed sees all",
           f"read {values(rc2)}", True)


# --- 4. fencing -----------------------------------------------------------------------------------

def check_fencing(mock):
    mock.create_topic("t4", 1)
    tid = new_tid()
    old = txn_producer(mock, tid)
    old.init_transactions(10)
    old.begin_transaction()
    e1 = produce_all(old, "t4", ["old-pending"])  # the old producer then "pauses" (SIGSTOP)
    new = txn_producer(mock, tid)
    new.init_transactions(10)  # a real coordinator: bumps the epoch, aborts old's transaction
    new.begin_transaction()
    e2 = produce_all(new, "t4", ["new-0"])
    new.commit_transaction(10)
    # The old producer resumes: produces once more and tries to commit.
    e3 = produce_all(old, "t4", ["old-after-resume"])
    try:
        old.commit_transaction(10)
        commit = "commit_transaction succeeded"
        fenced = False
    except KafkaException as e:
        commit = f"commit_transaction raised {kerr(e)}"
        ke = kerr_obj(e)
        fenced = bool(ke and ke.fatal() and ke.code() in (KafkaError.PRODUCER_FENCED,
                                                          KafkaError.INVALID_PRODUCER_EPOCH))
    rc = values(read(mock, "t4", "read_committed"))
    report(fenced and bool(e3), "4 second init_transactions fences the first producer",
           f"old's produce after resume: delivery errors {e3 or 'none (appended)'}; {commit}; "
           f"old's error_cb {[str(x) for x in old.errors]}", True)
    report("old-pending" not in rc and "old-after-resume" not in rc and "new-0" in rc,
           "4b fenced producer's writes never visible to read_committed",
           f"delivery errors {e1 + e2}; read_committed read {rc}", True)


def check_fence_injected(mock):
    """The best the mock allows for fencing: answer the old producer as a real broker would."""
    mock.create_topic("t4i", 1)
    out = []
    for api, name, err in ((API_END_TXN, "EndTxn", "PRODUCER_FENCED"),
                           (API_END_TXN, "EndTxn", "INVALID_PRODUCER_EPOCH"),
                           (API_PRODUCE, "Produce", "INVALID_PRODUCER_EPOCH"),
                           (API_ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", "INVALID_PRODUCER_EPOCH")):
        p = txn_producer(mock, new_tid(), **{"message.timeout.ms": 5000, "transaction.timeout.ms": 5000})
        p.init_transactions(10)
        p.begin_transaction()
        mock.command(f"error {api} {err} 1")
        derrs = produce_all(p, "t4i", [f"{name}-{err}"])
        try:
            p.commit_transaction(10)
            seen, fatal = "commit succeeded", False
        except KafkaException as e:
            seen, fatal = kerr(e), bool(kerr_obj(e) and kerr_obj(e).fatal())
        mock.command(f"clear {api}")
        out.append((f"{name} {err}", fatal, f"delivery {derrs or 'ok'}; commit: {seen}"))
    report(all(f for _, f, _ in out), "4c injected fencing errors are fatal to the producer",
           "; ".join(f"[{n}: {d}]" for n, _, d in out), False)


# --- 5. topic configs, compaction, offsets in a transaction ---------------------------------------

def check_topic_configs(mock):
    a = AdminClient({"bootstrap.servers": mock.bootstrap, "log_level": 0})
    try:
        fs = a.create_topics([NewTopic("cdc.position", 1, 1, config={"cleanup.policy": "compact"})],
                             request_timeout=5, operation_timeout=5)
        fs["cdc.position"].result(10)
        created = "create_topics succeeded"
        ok = True
    except Exception as e:  # noqa: BLE001
        created, ok = f"create_topics failed: {e}", False
    report(ok, "5 AdminClient.create_topics with cleanup.policy=compact", created, False)
    mock.create_topic("cdc.position", 1)  # the mock's own command: no configs
    try:
        fs = a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "cdc.position")],
                                request_timeout=5)
        cfg = list(fs.values())[0].result(10)
        desc, ok = f"cleanup.policy={cfg.get('cleanup.policy')}", True
    except Exception as e:  # noqa: BLE001
        desc, ok = f"describe_configs failed: {e}", False
    report(ok, "5b AdminClient.describe_configs on a topic", desc, False)
    p = txn_producer(mock, new_tid())
    p.init_transactions(10)
    for i in range(3):
        p.begin_transaction()
        produce_all(p, "cdc.position", [f"lsn-{i}"], key="slot")
        p.commit_transaction(10)
    rc = values(read(mock, "cdc.position", "read_committed"))
    report(None, "5c compaction", f"3 records with one key, all kept: {rc} (the mock has no log cleaner;"
           " a compacted topic reads the same until the cleaner runs)", False)
    # send_offsets_to_transaction: AddOffsetsToTxn + TxnOffsetCommit. Not the plan's mechanism,
    # checked because it is the other standard place for a position.
    group = f"probe-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": mock.bootstrap, "group.id": group, "log_level": 0})
    p.begin_transaction()
    produce_all(p, "cdc.position", ["with-offsets"], key="slot")
    try:
        p.send_offsets_to_transaction([TopicPartition("cdc.position", 0, 42)], c.consumer_group_metadata(), 10)
        p.commit_transaction(10)
        sent = "send_offsets_to_transaction + commit succeeded"
    except KafkaException as e:
        sent = f"raised {kerr(e)}"
    committed = c.committed([TopicPartition("cdc.position", 0)], timeout=10)[0].offset
    c.close()
    report(committed == 42, "5d offsets committed in a transaction are stored",
           f"{sent}; committed() for the group afterwards: {committed} (42 expected)", False)


# --- 6. error injection -----------------------------------------------------------------------------

def one_txn_with_errors(mock, topic, api, err, count, tag):
    """A transaction of 3 records with count errors err queued for api (before init_transactions
    for InitProducerId, else after begin_transaction), handled as an application should: a
    retriable commit error retries the commit, an abortable one aborts and produces the records
    again in a new transaction (attempt N: values end in -aN; up to 5 attempts). Returns the steps, as text."""
    # A produce error TOPIC_AUTHORIZATION_FAILED marks the topic failed in librdkafka until its next
    # metadata refresh (produce() then raises at once): refresh often so that a retry can succeed.
    p = txn_producer(mock, new_tid(), **{"message.timeout.ms": 8000, "transaction.timeout.ms": 8000,
                                         "topic.metadata.refresh.interval.ms": 500})
    steps = []
    if api == API_INIT_PRODUCER_ID:
        mock.command(f"error {api} {err} {count}")
    p.init_transactions(15)
    vals = [f"{tag}-{i}" for i in range(3)]
    for attempt in range(5):
        p.begin_transaction()
        if attempt == 0 and api != API_INIT_PRODUCER_ID:
            mock.command(f"error {api} {err} {count}")
        derrs = produce_all(p, topic, [f"{v}-a{attempt}" for v in vals])
        if any(e.startswith("produce raised") for e in derrs):
            # A record that never entered the transaction: committing would lose it.
            p.abort_transaction(10)
            steps.append(f"attempt {attempt}: {derrs}, aborted without committing")
            time.sleep(1.5)
            continue
        try:
            p.commit_transaction(10)
            steps.append(f"attempt {attempt}: delivery {derrs or 'ok'}, committed")
            break
        except KafkaException as e:
            ke = kerr_obj(e)
            steps.append(f"attempt {attempt}: delivery {derrs or 'ok'}, commit raised {kerr(e)}")
            if ke and ke.fatal():
                break
            if ke and ke.retriable():
                try:
                    p.commit_transaction(10)
                    steps.append("commit retried: committed")
                    break
                except KafkaException as e2:
                    steps.append(f"commit retried: raised {kerr(e2)}")
                    ke = kerr_obj(e2)
            if ke and ke.txn_requires_abort():
                p.abort_transaction(10)
                steps.append("aborted")
    mock.command(f"clear {api}")
    return steps


def check_error_injection(mock):
    cases = [
        # (api, name, error, count, expected: "retry" = the client retries by itself and commits
        #  attempt 0; "abort" = commit raises txn_requires_abort, abort + a new transaction commits)
        (API_INIT_PRODUCER_ID, "InitProducerId", "COORDINATOR_LOAD_IN_PROGRESS", 3, "retry"),
        (API_PRODUCE, "Produce", "NOT_ENOUGH_REPLICAS", 3, "retry"),
        (API_PRODUCE, "Produce", "REQUEST_TIMED_OUT", 2, "retry"),
        (API_PRODUCE, "Produce", "TOPIC_AUTHORIZATION_FAILED", 1, "abort"),
        (API_PRODUCE, "Produce", "INVALID_RECORD", 1, "abort"),
        (API_PRODUCE, "Produce", "_TRANSPORT", 1, "retry"),
        (API_ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", "CONCURRENT_TRANSACTIONS", 3, "retry"),
        (API_ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", "TOPIC_AUTHORIZATION_FAILED", 1, "abort"),
        (API_END_TXN, "EndTxn", "NOT_COORDINATOR", 2, "retry"),
        (API_END_TXN, "EndTxn", "CONCURRENT_TRANSACTIONS", 2, "retry"),
        (API_END_TXN, "EndTxn", "_TRANSPORT", 1, "retry"),
        (API_END_TXN, "EndTxn", "REQUEST_TIMED_OUT", 1, "abort"),
    ]
    for i, (api, name, err, count, expect) in enumerate(cases):
        topic = f"t6-{i}"
        mock.create_topic(topic, 1)
        steps = one_txn_with_errors(mock, topic, api, err, count, f"{name}-{err}")
        ru = values(read(mock, topic, "read_uncommitted"))
        committed_attempt = None
        for s in steps:
            if s.startswith("attempt "):
                attempt = int(s.split()[1].rstrip(":"))
            if s.endswith("committed"):
                committed_attempt = attempt
        if expect == "retry":
            ok = committed_attempt == 0
        else:
            ok = committed_attempt is not None and committed_attempt > 0 and \
                any("txn_requires_abort=True" in s for s in steps) and "aborted" in steps
        # The committed attempt's records, each exactly once in the log (the mock keeps an aborted
        # attempt's records too: they are listed, not counted).
        mine = [v for v in ru if committed_attempt is not None and v.endswith(f"-a{committed_attempt}")]
        once = committed_attempt is not None and sorted(mine) == sorted(set(mine)) and len(mine) == 3
        report(ok and once, f"6 {name} {err} x{count} ({expect} expected)",
               f"{'; '.join(steps)}; log holds {ru}", True)


# --- 7. reading the last committed position back --------------------------------------------------

def check_read_back(mock):
    mock.create_topic("t7", 1)
    p = txn_producer(mock, new_tid())
    p.init_transactions(10)
    for i in range(3):
        p.begin_transaction()
        produce_all(p, "t7", [f"lsn-{i}"], key="slot")
        p.commit_transaction(10)
    c = Consumer({"bootstrap.servers": mock.bootstrap, "group.id": f"probe-{uuid.uuid4().hex}",
                  "isolation.level": "read_committed", "log_level": 0})
    lo, hi = c.get_watermark_offsets(TopicPartition("t7", 0), timeout=5)
    c.close()
    tail = values(read(mock, "t7", "read_committed", start=max(hi - 1, 0)))
    report(tail == ["lsn-2"], "7 seek to high watermark - 1 reads the last committed record",
           f"watermarks ({lo}, {hi}); from offset {hi - 1} read_committed read {tail}. On a real broker "
           f"the last offset of a transactional partition is a COMMIT marker: high-1 reads nothing", False)
    whole = values(read(mock, "t7", "read_committed"))
    report(whole[-1:] == ["lsn-2"], "7b read the partition to its end, keep the last record",
           f"read {whole}", True)
    # An open transaction after the committed ones: the read-back must not take its record.
    p.begin_transaction()
    produce_all(p, "t7", ["lsn-3-open"], key="slot")
    whole2 = values(read(mock, "t7", "read_committed"))
    report(whole2[-1:] == ["lsn-2"], "7c read-back ignores a later open transaction's record",
           f"read {whole2}", True)
    p.abort_transaction(10)
    whole3 = values(read(mock, "t7", "read_committed"))
    report(whole3[-1:] == ["lsn-2"], "7d read-back ignores an aborted transaction's record",
           f"read {whole3}", True)


# --- 8. other facts -------------------------------------------------------------------------------

def check_txn_timeout(mock):
    """A real coordinator aborts a transaction open longer than transaction.timeout.ms and bumps
    the epoch, so the late commit fails; this is what fences a producer that was paused while no
    other producer took over."""
    mock.create_topic("t8", 1)
    p = txn_producer(mock, new_tid(), **{"transaction.timeout.ms": 2000, "message.timeout.ms": 2000})
    p.init_transactions(10)
    p.begin_transaction()
    produce_all(p, "t8", ["late"])
    time.sleep(4)
    try:
        p.commit_transaction(10)
        got = "commit_transaction succeeded"
    except KafkaException as e:
        got = kerr(e)
    rc = values(read(mock, "t8", "read_committed"))
    report("succeeded" not in got and "late" not in rc,
           "8 coordinator aborts a transaction open past transaction.timeout.ms",
           f"commit 4 s after begin with transaction.timeout.ms=2000: {got}; read_committed read {rc}", False)


def check_coordinator_down(mock):
    """The mock picks the transaction coordinator by crc32(transactional.id) % brokers (unless set
    explicitly, which kafka_mock does not expose): take that broker down during a commit."""
    mock.create_topic("t9", 1)
    tid = new_tid()
    coord = zlib.crc32(tid.encode()) % BROKERS + 1  # brokers are listed 1..N
    p = txn_producer(mock, tid)
    p.init_transactions(10)
    p.begin_transaction()
    produce_all(p, "t9", ["x"])
    mock.down(coord)
    t0 = time.monotonic()
    try:
        p.commit_transaction(3)
        got = "committed with the coordinator down"
    except KafkaException as e:
        got = f"commit raised {kerr(e)}"
    mock.up(coord)
    try:
        p.commit_transaction(15)
        got += f"; after 'up {coord}' commit succeeded ({time.monotonic() - t0:.1f}s after the first try)"
    except KafkaException as e:
        got += f"; after 'up {coord}' commit raised {kerr(e)}"
    report(None, "8b transaction coordinator down during commit", f"coordinator broker {coord}: {got}; "
           f"read_committed read {values(read(mock, 't9', 'read_committed'))}", False)


def main():
    signal.signal(signal.SIGALRM, lambda *_: (print(f"FAIL probe: over {RUN_LIMIT}s, stopped", flush=True),
                                              os._exit(2)))
    signal.alarm(RUN_LIMIT)
    print(f"confluent_kafka {version()[0]}, librdkafka {libversion()[0]}, mock brokers {BROKERS}", flush=True)
    for fn in (check_commit, check_abort, check_open_txn, check_fencing, check_fence_injected,
               check_topic_configs, check_error_injection, check_read_back, check_txn_timeout,
               check_coordinator_down):
        with_mock(fn)
    missing = [name for status, name, needed, _ in results if status == "FAIL" and needed]
    print(f"\n{sum(s == 'PASS' for s, *_ in results)} PASS, {sum(s == 'FAIL' for s, *_ in results)} FAIL, "
          f"{sum(s == 'INFO' for s, *_ in results)} INFO", flush=True)
    if missing:
        print("missing for the exactly-once verification: " + "; ".join(missing), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""test_exactly_once.py: `kafka.exactly_once: true` end to end, read back by a read-committed
consumer that is not cdc's code (confluent_kafka) from librdkafka 2.0.2's mock cluster.

What the mock can and cannot show (tests/kafka/probe_transactions.py, `make probe-kafka-txn`): it
runs transactions (InitProducerId, AddPartitionsToTxn, EndTxn, injected transactional errors) but
writes no commit or abort markers and keeps no last stable offset, so a read-committed consumer
also sees the records of a transaction that never committed, and a second producer with the same
transactional.id does not fence the first. So:
  - with restarts that leave no transaction open (SIGTERM), the consumer sees every change exactly
    once, the position record of each Kafka transaction follows its events, and the last one holds
    the last commit LSN;
  - after kill -9, the copies the consumer sees are only of source transactions after the position
    the restarted cdc read back: the open transaction the crash left, which a real broker aborts
    when the new producer initialises; everything at or before the position is skipped, not sent
    again;
  - injected errors show cdc's side of the rules: an abortable one aborts and resends from the
    slot, a fencing one rebuilds the producer; nothing is lost;
  - a paused active one resumed after a takeover commits nothing, by cdc's own rule (a Kafka
    transaction ends only while its process holds the stream), not by the broker's fencing.
"""

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import wait_for  # noqa: E402
from kafka_fixtures import lsn_text, row_plain  # noqa: E402
from pg import lsn_to_int  # noqa: E402
from test_kafka import (RESTART_LOG, check_counters, drain, event_id, kill9_run,  # noqa: E402
                        slot_confirmed, start_load_run)
from test_status import get  # noqa: E402

EO = {"exactly_once": True}
API_END_TXN = 26
POSITION_LOG = re.compile(r"exactly once: Kafka holds the stream up to the position read back.* position=(\S+)")


def copies(msgs):
    """{event id: times seen} of the events seen more than once."""
    return {k: n for k, n in collections.Counter(event_id(m) for m in msgs).items() if n > 1}


def position_records(kafka_reader, slot, last):
    """(commit LSN, events) of each record of slot's producer in the positions topic, in partition
    order, once the last one read holds last. A Kafka transaction's last record holds its newest
    source transaction (events > 0); its first restates the position it goes on from (events 0)."""
    key = f"cdc-{slot}".encode()
    reader = kafka_reader(["cdc.positions"], transactions_topic="cdc.positions", group=False)

    def mine(ms):
        return [(m.txn.commit_lsn, m.txn.events) for m in ms if m.key == key]
    reader.wait_until(lambda ms: [lsn for lsn, _ in mine(ms)[-1:]] == [last],
                      what=f"a position record holding {lsn_text(last)}")
    return mine(reader.snapshot())


def positions(kafka_reader, slot, last):
    """The commit LSNs of the Kafka transactions' last records (position_records)."""
    return [lsn for lsn, events in position_records(kafka_reader, slot, last) if events]


def copies_only_after(msgs, position):
    """Every change seen more than once has a commit LSN after position, and is seen at most twice."""
    late = {k: n for k, n in copies(msgs).items() if k[1] <= position}
    assert late == {}, f"sent again at or before the position {lsn_text(position)}: {sorted(late)[:5]}"
    assert max(copies(msgs).values(), default=1) <= 2


def committed_some(c):
    """Waits until c's cdc committed Kafka transactions (the first waits for the producer's start)."""
    wait_for(lambda: json.loads(get(c, "/status")[1])["kafka"].get("transactions_committed", 0) >= 3, 30,
             what="three Kafka transactions committed")


def read_back(p):
    """The positions the process logged it read back from Kafka, as integers."""
    return [lsn_to_int(x) if x != "0/0" else 0 for x in POSITION_LOG.findall(p.stderr())]


def test_each_change_once_across_sigterm_and_the_position_follows(pg, schema, cdc, kafka, kafka_reader):
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=EO)
    load.wait_more(100)
    assert p.terminate() == 0, p.describe()
    assert read_back(p) == [0], p.describe()  # a new transactional.id: nothing in Kafka yet
    load.wait_more(100)
    p2 = c.start()
    load.wait_more(100)
    msgs = drain(load, p2, reader, schema)
    assert copies(msgs) == {}
    check_counters(msgs, load, strict=True)
    commit_lsns = sorted({m.event.commit_lsn for m in msgs})
    records = position_records(kafka_reader, c.slot, commit_lsns[-1])
    # Each Kafka transaction but the very first starts with the position the one before it ended at
    # (the first of the second run with the one it read back).
    assert records[0][1] > 0 and all(events or records[i - 1] == (lsn, records[i - 1][1]) > (lsn, 0)
                                     for i, (lsn, events) in enumerate(records)), records
    pos = [lsn for lsn, events in records if events]
    assert pos == sorted(set(pos)), "position records not strictly increasing"
    assert len(records) == 2 * len(pos) - 1, records
    assert set(pos) <= set(commit_lsns), "a position record names a commit that sent no event"
    # Several source transactions per Kafka transaction under load.
    assert len(pos) < len(commit_lsns), (len(pos), len(commit_lsns))
    # The restart read back the position the first run committed last, before it stopped.
    first_run_last = read_back(p2)[0]
    assert first_run_last in pos and first_run_last > 0
    wait_for(lambda: json.loads(get(c, "/status")[1])["kafka"]["position"] == lsn_text(commit_lsns[-1]), 10,
             what="the status figures (published every second)")
    st = json.loads(get(c, "/status")[1])["kafka"]
    assert st["exactly_once"] is True and st["transactions_aborted"] == 0, st
    assert st["transactions_committed"] > 0 and st["position"] == lsn_text(commit_lsns[-1]), st
    out = subprocess.run([os.environ.get("CDC_BIN", "build/cdc"), "status", "-c", c.path], capture_output=True,
                         text=True, timeout=30)
    assert (f"kafka   exactly once: position={lsn_text(commit_lsns[-1])}  committed={st['transactions_committed']}"
            "  aborted=0") in out.stdout.splitlines(), out.stdout
    metrics = get(c, "/metrics")[1]
    assert 'cdc_kafka_transactions_total{outcome="aborted"} 0' in metrics.splitlines()
    end = lsn_to_int(pg.current_wal_lsn())
    wait_for(lambda: slot_confirmed(c) >= end, 30, what=f"the slot to pass {lsn_text(end)}")
    assert p2.terminate() == 0, p2.describe()


def test_kill9_under_load_sends_again_only_after_the_position_read_back(pg, schema, cdc, kafka, kafka_reader):
    msgs, p2 = kill9_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=EO, before_kill=committed_some)
    [position] = read_back(p2)
    assert position > 0, p2.describe()
    # Every copy is of a source transaction after the position: the transaction the kill left
    # open (on a real broker aborted by the new producer's initialisation, invisible here).
    copies_only_after(msgs, position)
    assert p2.terminate() == 0, p2.describe()


def test_an_abortable_error_aborts_and_sends_again_from_the_slot(pg, schema, cdc, kafka, kafka_reader):
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=EO)
    broker = min(kafka.leaders([f"cdc.{schema}.rows"]))
    kafka.push_broker_errors(broker, "INVALID_RECORD", 1)
    wait_for(lambda: RESTART_LOG in p.stderr() or not p.running(), 30, what=p.describe())
    assert p.running(), p.describe()
    load.wait_more(100)
    msgs = drain(load, p, reader, schema)
    check_counters(msgs, load, strict=False)
    st = json.loads(get(c, "/status")[1])["kafka"]
    # Each restart aborted the open transaction. (The mock answers the first transaction after an
    # abort with OUT_OF_ORDER_SEQUENCE_NUMBER, another abortable error: probe 6 shows it without
    # cdc; so there may be two.)
    assert st["restarts"] >= 1 and st["transactions_aborted"] == st["restarts"], st
    assert p.terminate() == 0, p.describe()


def test_a_fenced_producer_is_rebuilt_and_reads_the_position_back(pg, schema, cdc, kafka, kafka_reader):
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=EO)
    kafka.push_errors("PRODUCER_FENCED", 1, api_key=API_END_TXN)
    wait_for(lambda: "fenced: a newer producer with the same transactional.id" in p.stderr() or not p.running(),
             30, what=p.describe())
    assert p.running(), p.describe()
    wait_for(lambda: len(read_back(p)) == 2, 30, what=f"the rebuilt producer to read the position back\n{p.describe()}")
    load.wait_more(100)
    msgs = drain(load, p, reader, schema)
    check_counters(msgs, load, strict=False)
    copies_only_after(msgs, read_back(p)[1])
    assert p.terminate() == 0, p.describe()


def test_standby_takes_over_within_seconds_and_skips_what_kafka_holds(pg, schema, cdc, kafka, kafka_reader):
    """Two cdc with one config but their own state_dir (two pods): the active one is killed under
    load, the standby streams within 10 s, reads the position back and nothing is lost; copies
    only after that position (see the module docstring)."""
    load, a, pa, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=EO)
    b = cdc(subscriptions=a.config["subscriptions"], kafka=a.config["kafka"],
            source={"slot": a.slot, "publication": a.publication})
    pb = b.run()
    wait_for(lambda: "standby: another process streams the replication slot" in pb.stderr(), 30, what=pb.describe())
    committed_some(a)
    pa.kill()
    wait_for(lambda: "taking over" in pb.stderr(), 10, what=f"the standby to take over\n{pb.describe()}")
    b.wait_streaming(pb)
    load.wait_more(100)
    msgs = drain(load, pb, reader, schema)
    check_counters(msgs, load, strict=False)
    [position] = read_back(pb)
    assert position > 0, pb.describe()
    copies_only_after(msgs, position)
    assert pb.terminate() == 0, pb.describe()


def test_a_paused_active_one_resumed_after_a_takeover_writes_nothing(pg, schema, cdc, kafka, kafka_reader):
    """The active cdc is stopped (SIGSTOP) under load with Kafka transactions in flight; its
    walsender ends (as wal_sender_timeout would end it; the test ends it at once) and the standby
    takes over and commits past everything the stopped one had. Resumed (SIGCONT), the old one
    writes nothing: no message it produces after resuming reaches Kafka (none made since is a copy,
    the positions never go back), it turns standby, and with the standby's stream nothing is lost.
    A real broker would also fence its producer when the standby's starts; the mock does not (see
    the module docstring), so what this shows is cdc's own rule: a Kafka transaction ends only while
    its process holds the stream its source transactions came on."""
    load, a, pa, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader,
                                         kafka_extra=dict(EO, commit_interval="1s"))  # always one open
    b = cdc(subscriptions=a.config["subscriptions"], kafka=a.config["kafka"],
            source={"slot": a.slot, "publication": a.publication})
    pb = b.run()
    wait_for(lambda: "standby: another process streams the replication slot" in pb.stderr(), 30, what=pb.describe())
    committed_some(a)
    os.kill(pa.pid, signal.SIGSTOP)
    try:
        paused_at = lsn_to_int(pg.sql("select pg_current_wal_lsn()::text")[0][0])
        pg.sql("select pg_terminate_backend(active_pid) from pg_replication_slots where slot_name = %s", (a.slot,))
        wait_for(lambda: "taking over" in pb.stderr(), 10, what=f"the standby to take over\n{pb.describe()}")
        wait_for(lambda: lsn_to_int(json.loads(get(b, "/status")[1])["kafka"]["position"] or "0/0") > paused_at, 30,
                 what=f"the standby to commit past all the stopped one had\n{pb.describe()}")
        resumed_ms = time.time() * 1000
    finally:
        os.kill(pa.pid, signal.SIGCONT)
    wait_for(lambda: pa.stderr().count("standby: another process streams the replication slot") == 1, 30,
             what=f"the resumed one to turn standby\n{pa.describe()}")
    load.wait_more(100)
    msgs = drain(load, pb, reader, schema)
    check_counters(msgs, load, strict=False)
    [position] = read_back(pb)
    copies_only_after(msgs, position)
    seen = collections.Counter(event_id(m) for m in msgs)
    late_copies = [m for m in msgs if m.timestamp >= resumed_ms and seen[event_id(m)] > 1]
    assert late_copies == [], f"made after the resume and already on Kafka: {late_copies[:3]}\n{pa.describe()}"
    records = [lsn for lsn, _ in position_records(kafka_reader, a.slot, max(m.event.commit_lsn for m in msgs))]
    assert records == sorted(records), f"the positions went back\n{pa.describe()}"
    assert pa.terminate() == 0, pa.describe()
    assert pb.terminate() == 0, pb.describe()


def test_the_stream_ends_while_reading_is_paused_for_a_commit(pg, schema, cdc, kafka, kafka_reader):
    """Reading the slot pauses while a Kafka transaction commits with much held behind it (a small
    queue.buffering.max.kbytes, brokers answering after 1 s); the walsender ends then. The commit
    may not end without the stream, and the stream is read only when reading resumes: cdc must see
    the ended stream all the same (the commit's check hands it over), stream again and go on with
    nothing lost and copies only after a boundary."""
    from test_kafka import kafka_section
    props = dict(kafka_section(kafka)["properties"], **{"queue.buffering.max.kbytes": "64"})
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=dict(EO, properties=props))
    committed_some(c)
    paused = p.stderr().count("paused reading the slot: a sink is busy")
    kafka.set_rtt(1000)  # each step of a commit takes a second: the pause lasts
    try:
        wait_for(lambda: p.stderr().count("paused reading the slot: a sink is busy") > paused, 30, what=p.describe())
        [(walsender,)] = pg.sql("select active_pid from pg_replication_slots where slot_name = %s", (c.slot,))
        pg.sql("select pg_terminate_backend(%s)", (walsender,))
        kafka_then = json.loads(get(c, "/status")[1])["kafka"]
        try:
            wait_for(lambda: "the server closed the replication connection" in p.stderr(), 60,
                     what="cdc to see that the stream ended")
        except AssertionError as e:  # the Kafka sink's figures say whether its commits went on
            alive = pg.sql("select count(*) from pg_stat_activity where pid = %s", (walsender,))[0][0]
            raise AssertionError(f"{e}; walsender {walsender} "
                                 f"{'still runs' if alive else 'ended'}\nkafka at the terminate: {kafka_then}\n"
                                 f"/status now: {get(c, '/status')[1]}\n{p.describe()}") from None
    finally:
        kafka.set_rtt(0)
    wait_for(lambda: p.stderr().count(" streaming slot=") == 2, 30, what=f"cdc to stream again\n{p.describe()}")
    load.wait_more(100)
    msgs = drain(load, p, reader, schema)
    check_counters(msgs, load, strict=False)
    copies_only_after(msgs, read_back(p)[0])
    assert p.terminate() == 0, p.describe()


def five_in_one_kafka_transaction(pg, schema, cdc, kafka, kafka_reader, interval):
    """cdc with kafka.commit_interval interval, and five one-row source transactions committed at
    once: (Cdc, CdcProcess, a reader of the table's topic)."""
    from test_kafka import kafka_section, ksub
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"])], kafka=kafka_section(kafka, commit_interval=interval, **EO))
    p = c.start()
    for i in range(5):
        pg.sql(f"insert into {schema}.t values (%s)", (i,))
    return c, p, kafka_reader([f"cdc.{schema}.t"], group=False)


def test_commit_interval_batches_source_transactions_and_commits_when_quiet(pg, schema, cdc, kafka, kafka_reader):
    """kafka.commit_interval: 5s keeps one Kafka transaction open for five quick source
    transactions; it commits when due although nothing else arrives (one position record)."""
    c, p, reader = five_in_one_kafka_transaction(pg, schema, cdc, kafka, kafka_reader, "5s")
    msgs = reader.wait(5, describe=p.describe)
    last = max(m.event.commit_lsn for m in msgs)
    # One record: a first Kafka transaction has no position before it to restate.
    [(lsn, events)] = position_records(kafka_reader, c.slot, last)
    assert lsn == last and events >= 5, (lsn, events)
    wait_for(lambda: json.loads(get(c, "/status")[1])["kafka"]["position"] == lsn_text(last), 10,
             what="the status figures (published every second)")
    st = json.loads(get(c, "/status")[1])["kafka"]
    assert st["transactions_committed"] == 1, st
    assert p.terminate() == 0, p.describe()


def test_a_broken_stream_with_a_kafka_transaction_open_sends_nothing_twice(pg, schema, cdc, kafka, kafka_reader):
    """The walsender dies while a Kafka transaction (kept open by commit_interval) holds source
    transactions the slot has not confirmed: the slot sends them again, and cdc leaves them out
    (the open transaction holds them); it commits once, when due."""
    c, p, reader = five_in_one_kafka_transaction(pg, schema, cdc, kafka, kafka_reader, "4s")
    reader.wait(5, describe=p.describe)  # produced; the mock shows records before their commit
    pg.sql("select pg_terminate_backend(active_pid) from pg_replication_slots where slot_name = %s", (c.slot,))
    wait_for(lambda: p.stderr().count(" streaming slot=") == 2, 30, what=f"cdc to stream again\n{p.describe()}")
    pg.sql(f"insert into {schema}.t values (5)")
    msgs = reader.wait(6, describe=p.describe)
    last = max(m.event.commit_lsn for m in msgs)
    assert positions(kafka_reader, c.slot, last)[-1] == last
    assert copies(reader.snapshot()) == {}
    wait_for(lambda: json.loads(get(c, "/status")[1])["kafka"]["transactions_skipped"] == 5, 10,
             what=f"the five source transactions sent again to be skipped\n{p.describe()}")
    assert p.terminate() == 0, p.describe()



def test_an_abortable_error_while_messages_are_in_flight_aborts_instead_of_waiting(pg, schema, cdc, kafka,
                                                                                   kafka_reader):
    """One source transaction writes two tables whose topics have different leaders, neither the
    transaction coordinator. Table a's leader refuses a request (NOT_ENOUGH_REPLICAS, retried) and
    the one behind it (OUT_OF_ORDER_SEQUENCE_NUMBER): librdkafka then needs an epoch bump, so the
    Kafka transaction fails (abortable) and librdkafka sends nothing more. Table b's leader answers
    late, with a retriable error, after that: its messages go back to librdkafka's queue, where no
    delivery report comes for them until an abort. cdc must learn of the failure while they are in
    flight, abort and stream again; it used to wait for their reports for good (seen once in CI:
    39 messages in flight)."""
    from test_kafka import kafka_section, ksub
    leaders = {}
    for t in ("a", "b", "c", "d"):  # the mock spreads leaders: two of four topics differ
        pg.sql(f"create table {schema}.{t} (id int primary key)")
        kafka.create_topic(f"cdc.{schema}.{t}", 1)
        (leaders[t],) = kafka.leaders([f"cdc.{schema}.{t}"])
    other = next(t for t in "bcd" if leaders[t] != leaders["a"])
    topics = [f"cdc.{schema}.a", f"cdc.{schema}.{other}"]
    reader = kafka_reader(topics, group=False)
    section = kafka_section(kafka, **EO)
    # Requests of one message each, up to five in flight: the refused one has one behind it.
    section["properties"].update({"max.in.flight.requests.per.connection": "5", "batch.num.messages": "1"})
    c = cdc(subscriptions=[ksub("k", [f"{schema}.a", f"{schema}.{other}"])], kafka=section)
    (coordinator,) = {1, 2, 3} - {leaders["a"], leaders[other]}
    kafka.set_coordinator(coordinator, f"cdc-{c.slot}")
    # The positions topic's leader too: a Kafka transaction's first record goes there, and on a's
    # leader its request would take the injected errors meant for a's messages.
    kafka.create_topic("cdc.positions", 1, exist_ok=True)  # an earlier test's producer may have made it
    kafka.set_leader("cdc.positions", 0, coordinator)
    p = c.start()
    pg.sql(f"begin; insert into {schema}.a values (0); insert into {schema}.{other} values (0); commit")
    reader.wait(2, describe=p.describe)  # the producer's connections to both leaders are up
    kafka.set_rtt(300, leaders["a"])
    kafka.set_rtt(1500, leaders[other])
    kafka.push_broker_errors(leaders["a"], "NOT_ENOUGH_REPLICAS", 1)
    kafka.push_broker_errors(leaders["a"], "OUT_OF_ORDER_SEQUENCE_NUMBER", 1)
    kafka.push_broker_errors(leaders[other], "NOT_ENOUGH_REPLICAS", 1)
    pg.sql(f"begin; insert into {schema}.{other} select g from generate_series(1, 20) g; "
           f"insert into {schema}.a select g from generate_series(1, 20) g; commit")
    try:
        wait_for(lambda: all(kafka.pending_errors(b) == 0 for b in set(leaders.values())), 30,
                 what="the injected errors to be served")
        time.sleep(2)  # the late answers come
    finally:
        kafka.set_rtt(0)
    pg.sql(f"insert into {schema}.a values (21)")

    def ids():
        return {(m.topic, row_plain(m.event.new_row)["id"]): m.event.commit_lsn for m in reader.snapshot()}
    reader.wait_until(lambda ms: (topics[0], 21) in ids(), what="the last insert", describe=p.describe)
    wait_for(lambda: json.loads(get(c, "/status")[1])["kafka"]["position"] == lsn_text(ids()[(topics[0], 21)]), 30,
             what=f"the last insert committed to Kafka\n{p.describe()}")
    assert set(ids()) >= {(topics[0], i) for i in range(22)} | {(topics[1], i) for i in range(21)}
    assert "the Kafka transaction failed while its messages were in flight" in p.stderr(), p.describe()
    st = json.loads(get(c, "/status")[1])["kafka"]
    assert st["transactions_aborted"] >= 1 and st["in_flight"] == 0, st
    assert p.terminate() == 0, p.describe()


def test_a_commit_the_broker_says_timed_out_ends_the_producer(pg, schema, cdc, kafka, kafka_reader):
    """EndTxn answered REQUEST_TIMED_OUT: librdkafka calls the transaction abortable, but the
    coordinator may still complete that commit later, and librdkafka 2.0.2 keeps the producer's
    epoch for the next transaction (no KIP-890), so a late end could land in it. Jepsen's advice:
    treat it as fatal. cdc makes a new producer, which fences the old epoch, and reads the position
    back before sending anything; nothing is lost and copies come only after that position."""
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=EO)
    committed_some(c)
    kafka.push_errors("REQUEST_TIMED_OUT", 1, api_key=API_END_TXN)
    wait_for(lambda: len(read_back(p)) == 2 or not p.running(), 30,
             what=f"a new producer to read the position back\n{p.describe()}")
    assert "the Kafka commit timed out" in p.stderr() and p.running(), p.describe()
    load.wait_more(100)
    msgs = drain(load, p, reader, schema)
    check_counters(msgs, load, strict=False)
    copies_only_after(msgs, read_back(p)[1])
    st = json.loads(get(c, "/status")[1])["kafka"]
    assert st["transactions_aborted"] == 0, st  # made again, not aborted with the old epoch
    assert p.terminate() == 0, p.describe()


def test_a_commit_slower_than_a_request_ends_the_producer(pg, schema, cdc, kafka, kafka_reader):
    """The coordinator answers one EndTxn 1.5 s late, past request.timeout.ms (1 s): librdkafka sends
    it again by itself and the commit succeeds, but the first copy may still be on its way, and
    with the epoch kept it could end the next transaction. So a commit that took longer than
    request.timeout.ms ends its producer: a new one fences it and reads the position back."""
    from test_kafka import kafka_section, ksub
    pg.sql(f"create table {schema}.t (id int primary key)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    reader = kafka_reader([topic], group=False)
    section = kafka_section(kafka, **EO)
    section["properties"]["request.timeout.ms"] = "1000"
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"])], kafka=section)
    kafka.set_coordinator(1, f"cdc-{c.slot}")
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1)")
    reader.wait(1, describe=p.describe)
    wait_for(lambda: json.loads(get(c, "/status")[1])["kafka"]["transactions_committed"] == 1, 10,
             what="the first commit")
    kafka.push_broker_errors(1, "NO_ERROR", 1, api_key=API_END_TXN, late_ms=1500)
    pg.sql(f"insert into {schema}.t values (2)")
    wait_for(lambda: len(read_back(p)) == 2 or not p.running(), 30,
             what=f"a new producer to read the position back\n{p.describe()}")
    # Past request.timeout.ms, whether the resumed commit succeeded by then or not.
    assert re.search(r"the Kafka commit (timed out|took longer than request.timeout.ms)", p.stderr()), p.describe()
    pg.sql(f"insert into {schema}.t values (3)")
    msgs = reader.wait_until(lambda ms: {row_plain(m.event.new_row)["id"] for m in ms} >= {1, 2, 3} and ms,
                             what="rows 1 to 3", describe=p.describe)
    last = max(m.event.commit_lsn for m in msgs)
    wait_for(lambda: json.loads(get(c, "/status")[1])["kafka"]["position"] == lsn_text(last), 30,
             what=f"row 3 committed\n{p.describe()}")
    assert copies(reader.snapshot()) == {}  # the late commit held row 2: the new producer skips it
    assert p.terminate() == 0, p.describe()



class ThreadStopper:
    """Stops one thread of another process now and then (ptrace: a seized thread stops alone, its
    process runs on), as a thread that gets no CPU for that long would be."""
    SEIZE, INTERRUPT, CONT, DETACH = 0x4206, 0x4207, 7, 17

    def __init__(self, tid):
        import ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        self.tid = tid
        self.call(self.SEIZE)

    def call(self, request):
        import ctypes
        if self.libc.ptrace(request, self.tid, None, None) != 0:
            raise OSError(ctypes.get_errno(), f"ptrace {request:#x} of thread {self.tid}")

    def stop(self, seconds):
        """False if the thread is gone (its process ended)."""
        try:
            self.call(self.INTERRUPT)
        except ProcessLookupError:
            return False
        os.waitpid(self.tid, 0x40000000)  # __WALL: until it stopped
        time.sleep(seconds)
        return True

    def run(self, seconds):
        self.call(self.CONT)
        time.sleep(seconds)

    def detach(self):
        self.call(self.INTERRUPT)
        os.waitpid(self.tid, 0x40000000)
        self.call(self.DETACH)


def rdkafka_main_thread(p):
    """The thread id of librdkafka's main thread in p's cdc (the producer's)."""
    tasks = f"/proc/{p.pid}/task"
    [tid] = [int(t) for t in os.listdir(tasks) if open(f"{tasks}/{t}/comm").read().strip() == "rdk:main"]
    return tid


def test_a_starved_librdkafka_thread_slows_the_commits_and_loses_nothing(pg, schema, cdc, kafka, kafka_reader):
    """librdkafka's main thread short of CPU (a container at its CPU limit, a busy node) answers the
    transactional calls late. cdc used to call each commit for 100 ms at a time and call it again:
    librdkafka 2.0.2 gives up a resumed call whose first step timed out, forgets that a commit is
    under way, takes the commit's answer for an abort's and asserts ("Invalid transaction state
    transition attempted: CommittingTransaction -> AbortedNotAcked"). Here that thread runs 5 ms
    out of every 205, under load, for 10 s: cdc runs throughout, and once the thread runs again
    every change arrives, once."""
    load, c, p, reader = start_load_run(pg, schema, cdc, kafka, kafka_reader, kafka_extra=EO)
    committed_some(c)
    thread = ThreadStopper(rdkafka_main_thread(p))
    try:
        for _ in range(50):
            assert thread.stop(0.2), p.describe()
            thread.run(0.005)
    finally:
        thread.detach()
    load.wait_more(100)
    msgs = drain(load, p, reader, schema)
    assert copies(msgs) == {}
    check_counters(msgs, load, strict=True)
    assert p.terminate() == 0, p.describe()

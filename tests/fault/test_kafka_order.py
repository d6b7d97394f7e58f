"""test_kafka_order.py: a Kafka batch that fails for good must not let the partition's later
messages overtake it. Found by the fault harness (make torture SEED=7 DURATION=600: after a
MSG_SIZE_TOO_LARGE answer, keys' version 1 landed after their version 2). cdc restarts the
producer and streams again from the slot, so the failed messages do arrive, but librdkafka went on
delivering the batches queued behind the failed one meanwhile (and cdc's restart flushes the
queue), so they landed after later changes of the same rows. cdc now sets
enable.gapless.guarantee with idempotence: the failed batch stops the producer. Here responses come
200 ms late, so batches queue behind the one that fails; without the setting this fails with
versions going backwards. Run by `make check-fault`.

A request librdkafka built before the failure may still go out after it; a real broker refuses it
(the producer's sequence numbers have a hole), the mock appends it (it checks them only for
transactional producers). What it appended is left out as the fault harness does (verify.py
'refused': only after a failed batch cdc logged, and only what the replay sends again); a make
check under load failed here on that before."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import wait_for  # noqa: E402
from kafka_fixtures import row_plain  # noqa: E402
from verify import failed_batches, refused_after_failed_batches  # noqa: E402

VERSIONS = 400


def test_failed_batch_is_not_overtaken(pg, schema, cdc, kafka, kafka_reader):
    pg.sql(f"create table {schema}.t (id int primary key, ver int not null)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    reader = kafka_reader([topic], group=False)
    c = cdc(subscriptions=[{"name": "k", "tables": [f"{schema}.t"], "sink": "kafka"}],
            kafka={"brokers": kafka.bootstrap,
                   "properties": {"linger.ms": "5", "reconnect.backoff.max.ms": "1000",
                                  "max.in.flight.requests.per.connection": "1"}})
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1, 0)")
    reader.wait(1, describe=p.describe)
    (leader,) = kafka.leaders([topic])
    kafka.set_rtt(200)  # answers 200 ms late: batches queue up behind the one that fails
    conn = pg.connect()
    cur = conn.cursor()
    for v in range(1, VERSIONS + 1):
        cur.execute(f"update {schema}.t set ver = %s where id = 1", (v,))
        time.sleep(0.002)  # a steady stream: several batches in flight and queued
        if v == VERSIONS // 3:
            kafka.push_broker_errors(leader, "MSG_SIZE_TOO_LARGE", 1)
    conn.close()
    wait_for(lambda: kafka.pending_errors(leader) == 0, timeout=30, what="the error to be served")
    kafka.set_rtt(0)

    def versions():
        return [row_plain(m.event.new_row)["ver"] for m in reader.snapshot()]
    wait_for(lambda: set(versions()) >= set(range(VERSIONS + 1)), timeout=60,
             what=f"every version on {topic}\n{p.describe()}")
    assert "a sink failed" in p.stderr(), p.describe()
    msgs = reader.snapshot()
    gone = refused_after_failed_batches([(m.event.commit_lsn, m.event.tx_index) for m in msgs],
                                        [n for tp, n in failed_batches([p.stderr()]) if tp == (topic, 0)])
    # Redeliveries repeat older versions; a version's first delivery never follows a newer one.
    first, seen = [], set()
    for v in [row_plain(m.event.new_row)["ver"] for i, m in enumerate(msgs) if i not in gone]:
        if v not in seen:
            seen.add(v)
            first.append(v)
    back = [(a, b) for a, b in zip(first, first[1:]) if b < a]
    assert not back, f"versions went backwards (newer, then older) {back[:10]}; first deliveries {first}"
    assert p.terminate() == 0, p.describe()

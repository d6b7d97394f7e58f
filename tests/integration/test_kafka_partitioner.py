"""test_kafka_partitioner.py: cdc puts each key in the partition Kafka's Java producers, Kafka
Connect and so Debezium put it in (docs/kafka.md: "Partitions"). The expected partition comes
from an independent murmur2 written here from Kafka's specification (Utils.murmur2 and
Utils.toPositive, as the Java client's partitioner uses them), not from librdkafka; kcat reads
where each record landed."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kafka_fixtures import kcat  # noqa: E402
from test_kafka import kafka_section, ksub  # noqa: E402
from conftest import wait_for  # noqa: E402
from registry_double import RegistryDouble  # noqa: E402

ROWS = 1000
PARTITION_COUNTS = (1, 3, 4, 12, 50)
# The partitioner hashes a key's bytes whatever made them: every count in one format, and every
# other format (each with keys of its own bytes) on one count.
TOPICS = [("json", n) for n in PARTITION_COUNTS] + [(f, 12) for f in ("protobuf", "debezium", "avro")]
M32 = 0xFFFFFFFF


def murmur2(data):
    """Kafka's Utils.murmur2: MurmurHash2 with seed 0x9747b28c, little-endian 4-byte blocks, in
    Java's 32-bit int arithmetic (multiplications wrap, >>> is an unsigned shift)."""
    m = 0x5BD1E995
    h = (0x9747B28C ^ len(data)) & M32
    whole = len(data) // 4
    for i in range(whole):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & M32
        k ^= k >> 24
        k = (k * m) & M32
        h = (h * m) & M32
        h ^= k
    tail = data[whole * 4:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & M32
    h ^= h >> 13
    h = (h * m) & M32
    h ^= h >> 15
    return h


def java_partition(key, partitions):
    """The Java producer's partition of a keyed record: toPositive(murmur2(key)) % partitions."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_murmur2_matches_kafkas_own_test_values():
    """The hash against the cases of Kafka's UtilsTest.testMurmur2 (signed Java ints), and the
    issue's example: the Java client puts {"id":1} in partition 0 of 4 (librdkafka's CRC32
    default put it in 1)."""
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for data, want in cases.items():
        assert murmur2(data) == want & M32, data
    assert java_partition(b'{"id":1}', 4) == 0


def test_every_key_lands_where_the_java_partitioner_puts_it(pg, schema, cdc, kafka):
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    subs, topics = [], {}
    for fmt, n in TOPICS:
        topic = f"{schema}.{fmt}.p{n}"
        kafka.create_topic(topic, n)
        topics[topic] = n
        subs.append(ksub(f"{fmt}_p{n}", [f"{schema}.t"], format=fmt, topic=topic))
    with RegistryDouble() as registry:  # format avro's schemas
        c = cdc(subscriptions=subs, kafka=kafka_section(kafka, schema_registry={"url": registry.url}))
        p = c.start()
        pg.sql(f"insert into {schema}.t select g, 'row ' || g from generate_series(1, {ROWS}) g")

        wrong = []
        for topic, n in topics.items():
            msgs = wait_for(lambda: (lambda m: m if len(m) >= ROWS else None)(kcat(kafka.bootstrap, topic)),
                            timeout=60, what=f"{ROWS} records on {topic}\n{p.describe()}")
            assert len(msgs) == ROWS, f"{topic}: {len(msgs)} records"
            assert len({m["key"] for m in msgs}) == ROWS, f"{topic}: keys are not distinct"
            if n > 1:  # every partition is used: the keys do spread
                assert {m["partition"] for m in msgs} == set(range(n)), topic
            wrong += [(topic, m["key"], m["partition"], java_partition(m["key"], n))
                      for m in msgs if m["partition"] != java_partition(m["key"], n)]
        assert p.terminate() == 0, p.describe()
    assert not wrong, f"{len(wrong)} records not in the Java partitioner's partition, e.g. {wrong[:5]}"


def test_kafka_properties_keep_librdkafkas_old_partitioner(pg, schema, cdc, kafka):
    """docs/kafka.md: partitioner: consistent_random in kafka.properties puts keys where cdc put
    them before (CRC32 of the key); {"id":1} then lands in partition 1 of 4."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    topic = f"{schema}.old.p4"
    kafka.create_topic(topic, 4)
    section = kafka_section(kafka)
    section["properties"]["partitioner"] = "consistent_random"
    c = cdc(subscriptions=[ksub("old", [f"{schema}.t"], format="json", topic=topic)], kafka=section)
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1)")
    msgs = wait_for(lambda: kcat(kafka.bootstrap, topic), timeout=30, what=f"a record on {topic}\n{p.describe()}")
    assert p.terminate() == 0, p.describe()
    assert [(m["key"], m["partition"]) for m in msgs] == [(b'{"id":1}', 1)]

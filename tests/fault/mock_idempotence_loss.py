"""mock_idempotence_loss.py: why the fault harness runs cdc's producer with
max.in.flight.requests.per.connection=1. No cdc involved: a plain idempotent producer
(confluent_kafka, librdkafka) against the mock cluster, with produce errors injected while
several requests are in flight.

    KAFKA_MOCK_BIN=build/tests/kafka_mock python3 tests/fault/mock_idempotence_loss.py

A real broker numbers an idempotent producer's batches per partition and refuses a batch whose
predecessor it does not have (OUT_OF_ORDER_SEQUENCE_NUMBER); librdkafka's recovery from a failed
batch relies on that. librdkafka 2.0.2's mock checks those numbers only for transactional
producers: an injected error answers a request without appending it, a later batch of the same
partition that was already in flight is appended, and librdkafka then reports the failed batch's
messages delivered (for REQUEST_TIMED_OUT: "implicitly acked by subsequent batch success") though
the topic never gets them. With one request in flight per connection there is no later batch to
overtake the failed one, and nothing is lost. This prints, per error and in-flight limit, the
messages reported delivered that the topic does not hold; it exits 1 if any are lost with one
request in flight (the harness's setting would then not be enough).
"""

import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from kafka_fixtures import KafkaMock  # noqa: E402

PARTITIONS = 4


def lost(error, in_flight, rounds=10, per_round=300):
    """(produced, reported delivered, messages reported delivered that the topic lacks)."""
    mock = KafkaMock(brokers=3)
    try:
        mock.create_topic("t", PARTITIONS)
        ok = [0]
        p = Producer({"bootstrap.servers": mock.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "max.in.flight.requests.per.connection": in_flight, "log_level": 0})
        mock.set_rtt(20)  # answers 20 ms late: several requests in flight at once
        rng = random.Random(1)
        n = 0
        for _ in range(rounds):
            mock.push_errors(error, rng.randint(1, 5))
            for i in range(per_round):
                p.produce("t", str(n).encode(), key=str(rng.randint(0, 1000)).encode(),
                          on_delivery=lambda err, msg: ok.__setitem__(0, ok[0] + (err is None)))
                n += 1
                p.poll(0)
                if i % 10 == 0:
                    time.sleep(0.003)
            p.flush(30)
        mock.set_rtt(0)
        c = Consumer({"bootstrap.servers": mock.bootstrap, "group.id": "mock-idempotence-loss", "log_level": 0})
        total = sum(c.get_watermark_offsets(TopicPartition("t", i), timeout=5)[1] for i in range(PARTITIONS))
        c.assign([TopicPartition("t", i, 0) for i in range(PARTITIONS)])
        seen, read, deadline = set(), 0, time.monotonic() + 60
        while read < total and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.add(int(m.value()))
                read += 1
        c.close()
        return n, ok[0], len(set(range(n)) - seen)
    finally:
        mock.close()


def main():
    bad = False
    for error in ("REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS", "NOT_LEADER_FOR_PARTITION"):
        for in_flight in (5, 1):
            n, ok, missing = lost(error, in_flight)
            print(f"{error:<26} max.in.flight={in_flight}: {n} produced, {ok} reported delivered, "
                  f"{missing} of those not in the topic", flush=True)
            bad |= in_flight == 1 and missing > 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

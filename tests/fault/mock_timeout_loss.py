"""mock_timeout_loss.py: why the fault harness does not inject REQUEST_TIMED_OUT into produce
requests. No cdc involved: a plain idempotent producer (confluent_kafka) against the mock cluster.

    KAFKA_MOCK_BIN=build/tests/kafka_mock python3 tests/fault/mock_timeout_loss.py

The mock's injected error answers a produce request without appending it. REQUEST_TIMED_OUT tells
librdkafka the batch was possibly persisted, and when a later batch of the same partition (already
in flight) succeeds, librdkafka takes the earlier one as implicitly acknowledged ("implicitly acked
by subsequent batch success") and reports it delivered. A real broker numbers an idempotent
producer's batches and would refuse the later one (OUT_OF_ORDER_SEQUENCE_NUMBER) if the earlier
were missing; librdkafka 2.0.2's mock checks sequences only for transactional producers, so the
messages are reported delivered and are not in the topic. This prints how many. Responses are
delayed 50 ms (rtt) so that several requests are in flight when the error is served.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from kafka_fixtures import KafkaMock  # noqa: E402


def main():
    mock = KafkaMock(brokers=1)
    try:
        mock.create_topic("t", 1)
        reports = {"ok": 0, "failed": 0}

        def dr(err, msg):
            reports["failed" if err else "ok"] += 1

        p = Producer({"bootstrap.servers": mock.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "log_level": 0})
        mock.set_rtt(50)
        n = 0
        for _ in range(10):
            mock.push_errors("REQUEST_TIMED_OUT", 1)
            for _ in range(200):
                p.produce("t", str(n).encode(), on_delivery=dr)
                n += 1
                p.poll(0)
                time.sleep(0.002)
            p.flush(30)
        mock.set_rtt(0)
        c = Consumer({"bootstrap.servers": mock.bootstrap, "group.id": "mock-timeout-loss", "log_level": 0})
        _, high = c.get_watermark_offsets(TopicPartition("t", 0), timeout=5)
        c.assign([TopicPartition("t", 0, 0)])
        seen, read, deadline = set(), 0, time.monotonic() + 30
        while read < high and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.add(int(m.value()))
                read += 1
        c.close()
        missing = sorted(set(range(n)) - seen)
        print(f"produced {n}: {reports['ok']} reported delivered, {reports['failed']} failed; the topic holds "
              f"{high} messages; reported delivered but not there: {len(missing)} {missing[:12]}")
        return 1 if missing else 0
    finally:
        mock.close()


if __name__ == "__main__":
    sys.exit(main())

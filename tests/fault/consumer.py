"""consumer.py: a socket-subscription consumer for the fault harness, run as a process of its own
so that the harness can kill -9 it mid-batch. Built on tests/subscriber_helpers.py (cdc_client): subscribes from
the acknowledged position, writes each delivered event as one line to OUT (flushed to the kernel,
so a kill -9 keeps it), and acknowledges a Delivery only after all of its events are written. It
exits 1 when cdc closes the connection (the harness starts the next consumer).

    python3 tests/fault/consumer.py SOCKET SUBSCRIPTION OUT [--consumer NAME] [--max-unacked N]
"""

import argparse
import sys

from events import from_proto, to_line
from subscriber_helpers import ServerError, Subscriber


def main():
    p = argparse.ArgumentParser()
    p.add_argument("socket")
    p.add_argument("subscription")
    p.add_argument("out")
    p.add_argument("--consumer", default=None)
    p.add_argument("--max-unacked", type=int, default=500)
    a = p.parse_args()
    try:
        s = Subscriber(a.socket, a.subscription, consumer=a.consumer, max_unacked=a.max_unacked,
                       heartbeat_ms=1000)
    except (OSError, EOFError, ServerError) as e:
        print(f"consumer: cannot subscribe: {e}", file=sys.stderr)
        return 1
    with open(a.out, "a", buffering=1) as out, s:
        while True:
            d = s.delivery(30)
            if d is None:
                if s.closed:
                    print("consumer: cdc closed the connection", file=sys.stderr)
                    return 1
                continue
            for e in d:
                out.write(to_line(from_proto(e)))
            out.flush()
            s.ack_events(d)


if __name__ == "__main__":
    sys.exit(main())

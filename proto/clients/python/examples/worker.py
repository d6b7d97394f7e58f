#!/usr/bin/env python3
"""worker.py: an example worker on cdc_client. Prints each event of a socket subscription as one
JSON line, then acknowledges it; survives cdc restarts. Exits after --count events or after
--idle seconds without one.

    PYTHONPATH=proto/clients/python python3 proto/clients/python/examples/worker.py \\
        /run/cdc/events.sock jobs --consumer worker-1
"""
import argparse
import datetime
import decimal
import json
import logging
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cdc_client import Consumer, ServerError  # noqa: E402


def native(v):
    """JSON for the values json cannot write itself."""
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (decimal.Decimal, uuid.UUID)):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    raise TypeError(type(v).__name__)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("socket")
    p.add_argument("subscription")
    p.add_argument("--consumer", default="example-worker")
    p.add_argument("--count", type=int, default=0, help="exit 0 after N events")
    p.add_argument("--idle", type=float, default=None, help="exit 0 after SECONDS without an event")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    done = 0
    try:
        with Consumer(a.socket, a.subscription, consumer=a.consumer, max_unacked=100) as c:
            for batch in c.batches(idle_timeout=a.idle):
                for e in batch:
                    print(json.dumps({"offset": e.offset, "op": e.op, "table": e.table, "row": e.row},
                                     default=native), flush=True)
                c.ack(*batch)  # one Ack frame for the whole delivery
                done += len(batch)
                if a.count and done >= a.count:
                    break
    except ServerError as e:
        print("worker: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

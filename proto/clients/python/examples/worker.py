#!/usr/bin/env python3
"""worker.py: an example worker on cdc_client. Prints each event of a socket subscription as one
JSON line, then acknowledges it; an event it cannot process is given back (nack) with the reason,
to be delivered again after --nack-delay seconds and, once the subscription's max_deliveries is
reached, moved to the dead letters. Survives cdc restarts. Exits 0 after --count events or after
--idle seconds without one; 1 when it never reached cdc within --idle, when cdc stayed unreachable
for --give-up seconds, or on an error from cdc. With --dead-letters it reads the dead letters
instead and prints each one's history.

    python3 proto/clients/python/examples/worker.py /run/cdc/events.sock jobs --consumer worker-1

with cdc_client installed (pip install proto/clients/python), or PYTHONPATH=proto/clients/python.
"""
import argparse
import datetime
import decimal
import json
import logging
import sys
import uuid

from cdc_client import ConnectionClosed, Consumer, ServerError


def native(v):
    """JSON for the values json cannot write itself."""
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (decimal.Decimal, uuid.UUID)):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    raise TypeError(type(v).__name__)


class CannotProcess(Exception):
    pass


def process(e, fail_on):
    """The work: one JSON line. A row matching --fail-on COLUMN=VALUE stands for one the worker
    cannot handle."""
    if fail_on and e.row is not None and str(e.row.get(fail_on[0])) == fail_on[1]:
        raise CannotProcess("%s=%s is not supported" % fail_on)
    line = {"offset": e.offset, "op": e.op, "table": e.table, "row": e.row}
    if e.dead_letter is not None:
        d = e.dead_letter
        line["dead_letter"] = {"original_offset": d.original_offset, "deliveries": d.deliveries,
                               "reason": d.reason, "dead_time": d.dead_time}
    print(json.dumps(line, default=native), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("socket")
    p.add_argument("subscription")
    p.add_argument("--consumer", default="example-worker")
    p.add_argument("--count", type=int, default=0, help="exit 0 after N events")
    p.add_argument("--idle", type=float, default=None, help="exit 0 after SECONDS without an event")
    p.add_argument("--dead-letters", action="store_true", help="read the subscription's dead letters")
    p.add_argument("--fail-on", metavar="COLUMN=VALUE", help="rows to treat as impossible to process")
    p.add_argument("--nack-delay", type=float, default=5.0, help="seconds before a failed event comes again")
    p.add_argument("--give-up", type=float, default=None,
                   help="exit 1 once cdc is unreachable this many seconds (default: keep trying)")
    a = p.parse_args()
    fail_on = tuple(a.fail_on.split("=", 1)) if a.fail_on else None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    done = 0
    try:
        with Consumer(a.socket, a.subscription, consumer=a.consumer, max_unacked=100,
                      dead_letters=a.dead_letters, give_up_after=a.give_up) as c:
            for batch in c.batches(idle_timeout=a.idle):
                ok = []
                for e in batch:
                    try:
                        process(e, fail_on)
                        ok.append(e)
                    except CannotProcess as exc:
                        logging.warning("offset %d (delivery %d): %s; given back", e.offset,
                                        e.delivery_count, exc)
                        c.nack(e, delay=a.nack_delay, reason=str(exc))
                c.ack(ok)  # one Ack frame for the delivery's processed events
                done += len(ok)
                if a.count and done >= a.count:
                    break
            if not c.connections:
                print("worker: never reached cdc at %s within %gs: is cdc running, and is this its "
                      "subscribers.socket?" % (a.socket, a.idle), file=sys.stderr)
                return 1
            try:
                c.wait_answered()  # cdc has every ack before the worker leaves
            except (ConnectionClosed, TimeoutError) as e:
                logging.warning("acks not confirmed (%s): those events come again", e)
    except (ServerError, ConnectionClosed) as e:
        print("worker: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

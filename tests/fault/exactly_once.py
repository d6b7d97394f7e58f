"""exactly_once.py: the fault harness's exactly-once check of the Kafka sink (--exactly-once).

With kafka.exactly_once, a source transaction goes to Kafka in one Kafka transaction that also
carries the commit LSN of the newest source transaction in it (the position). After a crash or an
aborted Kafka transaction, cdc sends again only what comes after the position Kafka holds: what
the restarted producer read back, or what the aborting one had committed. A read-committed
consumer of a real broker then sees each change once: the copies sent before are in a transaction
that never committed, which the broker aborts.

librdkafka 2.0.2's mock cluster writes no commit or abort markers (tests/kafka/probe_transactions.py),
so its read-committed consumer sees those never-committed copies too. What the mock does let us
check is the rule itself: every copy of a change must have been sent after a boundary (a position
read back by a new producer, or a Kafka transaction aborted; cdc logs both with the position) whose
position is below the change's commit LSN, and the copy before it before that boundary. A change
sent again although its commit LSN is at or below the position in force (Kafka held it) is a
violation: on a real broker the consumer would see it twice.
"""

import datetime
import re

# cdc's text log: "2026-11-25T17:12:55.389Z info  MESSAGE key=value ..."
BOUNDARY = re.compile(r"^(\S+Z) info  exactly once: (?:Kafka holds the stream up to the position read back|"
                      r"aborted the Kafka transaction)[^\n]* position=(\d+/[0-9A-F]+)", re.M)


def _ms(stamp):
    dt = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return int(dt.timestamp() * 1000 + 0.5)


def _lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _lsn_text(v):
    return f"{v >> 32:X}/{v & 0xFFFFFFFF:X}"


def boundaries(stderr_texts):
    """[(wall clock ms, position)] of every boundary the runs' logs show, in time order."""
    out = []
    for text in stderr_texts:
        out += [(_ms(t), _lsn(p)) for t, p in BOUNDARY.findall(text)]
    return sorted(out)


def check(times, bounds, max_examples=8):
    """times: {(commit_lsn, tx_index): [Kafka record timestamps in ms]} of every change; bounds:
    boundaries(). Returns (changes seen more than once, copies, violations, examples)."""
    repeated = copies = violations = 0
    examples = []
    for (cl, ti), ts in times.items():
        if len(ts) < 2:
            continue
        repeated += 1
        ts = sorted(ts)
        for before, t in zip(ts, ts[1:]):
            copies += 1
            between = [b for b in bounds if before <= b[0] <= t]
            if between and between[-1][1] < cl:
                continue
            violations += 1
            if len(examples) < max_examples:
                why = (f"position {_lsn_text(between[-1][1])} in force" if between
                       else "no restart or abort between the copies")
                examples.append(f"commit_lsn {_lsn_text(cl)} tx_index {ti} sent at {before} and again at {t} ms ({why})")
    return repeated, copies, violations, examples

"""test_rules.py: the subscription rules that look at values: `changed` (an update matches only when
one of the named columns changed) and `columns` (projection, key columns always kept)."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_spine import finish  # noqa: E402


def test_changed_matches_only_updates_that_change_the_columns(pg, schema, cdc):
    pg.sql(f"create table {schema}.orders (id int primary key, status text, amount numeric, note text)")
    pg.sql(f"alter table {schema}.orders replica identity full")
    c, p = cdc.start(subscriptions=[
        {"name": "status", "tables": [f"{schema}.orders"], "operations": ["insert", "update"],
         "changed": ["status", "note"], "sink": "stdout"}])
    pg.sql(f"insert into {schema}.orders values (1, 'new', 10, null)")
    pg.sql(f"update {schema}.orders set amount = 11 where id = 1")                 # no: amount only
    pg.sql(f"update {schema}.orders set status = 'paid' where id = 1")             # yes
    pg.sql(f"update {schema}.orders set status = 'paid', amount = 12 where id = 1")  # no: same status
    pg.sql(f"update {schema}.orders set note = 'gift' where id = 1")               # yes: note, from null
    pg.sql(f"update {schema}.orders set note = null where id = 1")                 # yes: note, to null
    pg.sql(f"delete from {schema}.orders where id = 1")                           # no: not an operation
    pg.sql(f"insert into {schema}.orders values (2, 'new', 1, null)")              # marks the end
    events = finish(p, 5)
    assert [(e["op"], e["new"]["status"], e["new"]["note"]) for e in events] == [
        ("insert", "new", None), ("update", "paid", None), ("update", "paid", "gift"),
        ("update", "paid", None), ("insert", "new", None)]


def test_changed_needs_replica_identity_full(pg, schema, cdc):
    pg.sql(f"create table {schema}.orders (id int primary key, status text)")
    c = cdc(subscriptions=[{"name": "status", "tables": [f"{schema}.orders"], "operations": ["update"],
                            "changed": ["status"], "sink": "stdout"}])
    p = c.run()
    assert p.wait_exit(30) == 1, p.describe()
    assert (f'subscription status uses changed: on table "{schema}"."orders", whose replica identity does not '
            f'send the old row of an update: ALTER TABLE "{schema}"."orders" REPLICA IDENTITY FULL') in p.stderr()


def test_columns_projects_rows_and_keeps_the_key(pg, schema, cdc):
    pg.sql(f"create table {schema}.orders (id int, region text, status text, amount numeric, note text, "
           "primary key (id, region))")
    c, p = cdc.start(subscriptions=[
        {"name": "slim", "tables": [f"{schema}.orders"], "columns": ["status"], "sink": "stdout"},
        {"name": "full", "tables": [f"{schema}.orders"], "sink": "stdout"}])
    pg.sql(f"insert into {schema}.orders values (1, 'eu', 'new', 10, 'x')")
    pg.sql(f"update {schema}.orders set status = 'paid' where id = 1")
    pg.sql(f"update {schema}.orders set region = 'us' where id = 1")  # key changed: old key sent
    pg.sql(f"delete from {schema}.orders where id = 1")
    events = finish(p, 8)
    slim = [(e["op"], e["key"], e["new"], e["old"]) for e in events if e["subscription"] == "slim"]
    full = [e["new"] for e in events if e["subscription"] == "full"]
    assert slim == [
        ("insert", {"id": 1, "region": "eu"}, {"id": 1, "region": "eu", "status": "new"}, None),
        ("update", {"id": 1, "region": "eu"}, {"id": 1, "region": "eu", "status": "paid"}, None),
        ("update", {"id": 1, "region": "eu"}, {"id": 1, "region": "us", "status": "paid"},
         {"id": 1, "region": "eu"}),
        ("delete", {"id": 1, "region": "us"}, None, {"id": 1, "region": "us"}),
    ]
    # The other subscription of the same change still gets every column.
    assert full[0] == {"id": 1, "region": "eu", "status": "new", "amount": "10", "note": "x"}


def test_where_filters_by_values(pg, schema, cdc):
    """The contract's example: numeric compares as a number, text as text, old.* under FULL."""
    pg.sql(f"create table {schema}.orders (id int primary key, status text, amount numeric(12,2))")
    pg.sql(f"alter table {schema}.orders replica identity full")
    c, p = cdc.start(subscriptions=[
        {"name": "paid", "tables": [f"{schema}.orders"], "operations": ["insert", "update"],
         "where": "new.status = 'paid' and new.amount >= 100", "sink": "stdout"},
        {"name": "unpaid", "tables": [f"{schema}.orders"], "operations": ["update"],
         "where": "old.status = 'paid' and new.status <> 'paid'", "sink": "stdout"}])
    pg.sql(f"insert into {schema}.orders values (1, 'paid', 100.00), (2, 'paid', 99.99), "
           f"(3, 'new', 500), (4, 'paid', 1000000000.5)")
    pg.sql(f"update {schema}.orders set status = 'paid' where id = 3")   # paid: yes
    pg.sql(f"update {schema}.orders set status = 'refunded' where id = 1")  # unpaid: yes
    pg.sql(f"update {schema}.orders set amount = 150 where id = 2")      # paid: yes (now >= 100)
    pg.sql(f"insert into {schema}.orders values (5, null, 200)")          # null status: unknown, no
    events = finish(p, 5)
    assert [(e["subscription"], e["op"], e["new"]["id"]) for e in events] == [
        ("paid", "insert", 1), ("paid", "insert", 4), ("paid", "update", 3),
        ("unpaid", "update", 1), ("paid", "update", 2)]


def test_bad_where_is_a_config_error_with_its_position(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('subscriptions:\n  - name: x\n    tables: ["public.t"]\n    sink: stdout\n'
                    '    where: "new.amount >= 100 and (new.status = \'paid\'"\n')
    out = subprocess.run([os.environ.get("CDC_BIN", "build/cdc"), "check-config", "-c", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.startswith(f"{path}:5:12: subscriptions[0].where: position "), out.stderr

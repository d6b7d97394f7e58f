"""test_publication.py: the publication cdc creates (source.create) for the role the README
describes: LOGIN REPLICATION, owning its tables, not a superuser. FOR TABLES IN SCHEMA needs a
superuser, so cdc publishes the matching tables it owns and adds those created later (at start, at
a reload, every 10 s); a table it may not add is named with the statement its owner runs; a
`snapshot: true` subscription backfills a table added later, whose rows from before it was added
are not in the stream; and when the role owns none of the tables, cdc stops with the ways out."""

import itertools
import signal

import psycopg2

from conftest import wait_for

_roles = itertools.count(1)


class Role:
    """A LOGIN REPLICATION role (not a superuser) that may create publications and tables in the
    test's schema; dropped with what it owns."""

    def __init__(self, pg, schema):
        self.pg = pg
        self.name = f"cdc_role_{next(_roles)}_{schema}"[:63]
        pg.sql(f'create role "{self.name}" login replication')
        pg.sql(f'grant create on database postgres to "{self.name}"')
        pg.sql(f'grant usage, create on schema "{schema}" to "{self.name}"')
        self.dsn = pg.dsn.replace("user=postgres", f"user={self.name}")

    def sql(self, query):
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(query)
        finally:
            conn.close()

    def drop(self):
        self.pg.sql(f'drop owned by "{self.name}" cascade')
        self.pg.sql(f'drop role "{self.name}"')


def test_a_replication_role_owning_its_tables_gets_a_publication_kept_current(pg, schema, cdc):
    role = Role(pg, schema)
    try:
        role.sql(f"create table {schema}.a (id int primary key)")
        role.sql(f"insert into {schema}.a values (1)")
        pg.sql(f"create table {schema}.theirs (id int primary key)")  # owned by postgres
        pg.sql(f'grant select on {schema}.theirs to "{role.name}"')
        c = cdc(subscriptions=[{"name": "all", "tables": [f"{schema}.*"], "sink": "stdout"},
                               {"name": "snap", "tables": [f"{schema}.*"], "sink": "stdout", "snapshot": True}],
                source={"dsn": role.dsn})
        p = c.start()
        err = p.stderr()
        assert f'FOR TABLE \\"{schema}\\".\\"a\\"' in err or f'FOR TABLE "{schema}"."a"' in err, err
        assert (f'table "{schema}"."theirs" matches source.publish, but cdc\'s role does not own it' in err and
                f'ADD TABLE "{schema}"."theirs"' in err), err
        rows = pg.sql("select schemaname, tablename from pg_publication_tables where pubname = %s", (c.publication,))
        assert rows == [(schema, "a")], rows
        # the snapshot reads a; the stream brings a's changes
        p.wait_events(1, pred=lambda e: e["op"] == "read" and e["table"] == "a")
        role.sql(f"insert into {schema}.a values (2)")
        p.wait_events(1, pred=lambda e: e["op"] == "insert" and e["table"] == "a")

        # A table created later joins the publication at a reload, and within 10 s by itself. Its
        # rows from before that are not in the stream: a snapshot subscription gets them as reads.
        for table, join in (("b", lambda: p.signal(signal.SIGHUP)), ("c", lambda: None)):
            role.sql(f"create table {schema}.{table} (id int primary key)")
            role.sql(f"insert into {schema}.{table} values (1)")
            join()
            wait_for(lambda: f"added a table to the publication publication={c.publication} schema={schema} "
                             f"table={table}" in p.stderr(), 20, what=f"{table} in the publication")
            role.sql(f"insert into {schema}.{table} values (2)")
            got = p.wait_events(1, pred=lambda e: e["table"] == table and e["subscription"] == "all")
            assert [(e["op"], e["new"]["id"]) for e in got] == [("insert", 2)], got
            reads = p.wait_events(1, pred=lambda e: e["table"] == table and e["op"] == "read" and
                                  e["new"]["id"] == 1)
            assert all(e["subscription"] == "snap" for e in reads), reads
        assert p.terminate() == 0
    finally:
        for inst in cdc.instances:
            pg.sql(f'drop publication if exists "{inst.publication}"')
        role.drop()


def test_a_role_that_owns_none_of_the_tables_is_told_the_ways_out(pg, schema, cdc):
    role = Role(pg, schema)
    try:
        pg.sql(f"create table {schema}.theirs (id int primary key)")
        c = cdc(source={"dsn": role.dsn})
        p = c.run()
        assert p.wait_exit(30) == 1, p.describe()
        err = p.stderr()
        assert (f"cdc's role may not create publication {c.publication}: FOR TABLES IN SCHEMA and FOR ALL "
                f"TABLES need a superuser, and FOR TABLE the tables' ownership, but the role owns none of the 1 "
                f'tables source.publish matches ("{schema}"."theirs")') in err, err
        assert f'have a superuser run CREATE PUBLICATION "{c.publication}" FOR TABLES IN SCHEMA "{schema}"' in err
    finally:
        role.drop()


def test_a_misspelt_table_stops_cdc_with_the_closest_names(pg, schema, cdc):
    """Issue 31: a table named one by one (no glob) that does not exist, in source.publish or in a
    subscription's tables, stops cdc at start with the closest names; a glob that matches nothing
    yet stays a warning, since its tables may come later."""
    pg.sql(f"create table {schema}.orders (id int primary key)")
    subs = [{"name": "orders", "tables": [f"{schema}.ordres"], "sink": "stdout"}]
    # in source.publish: the publication is not created
    p = cdc(subscriptions=subs, publish=[f"{schema}.ordres"]).run()
    assert p.wait_exit(30) == 1, p.describe()
    assert (f"source.publish names table {schema}.ordres, which does not exist: did you mean {schema}.orders?: "
            "correct it, or create the table first") in p.stderr(), p.stderr()
    # in a subscription's tables (the publication holds the schema): cdc stops before it delivers
    c = cdc(subscriptions=subs)
    p = c.run()
    assert p.wait_exit(30) == 1, p.describe()
    assert (f"subscription orders names table {schema}.ordres, which does not exist: did you mean "
            f"{schema}.orders?") in p.stderr(), p.stderr()
    assert "a subscription of the configuration file cannot work on its tables" in p.stderr()
    # a glob: a warning, and cdc streams
    c = cdc(subscriptions=[{"name": "later", "tables": [f"{schema}.invoice*"], "sink": "stdout"},
                           {"name": "orders", "tables": [f"{schema}.orders"], "sink": "stdout"}])
    p = c.start()
    assert f"table pattern {schema}.invoice* matches no table of publication" in p.stderr()
    assert p.terminate() == 0

#!/bin/sh
# init-cdc.sh: what cdc and the standby need from the database, run once by the postgres image on
# pg-0 when its data directory is first initialised (/docker-entrypoint-initdb.d, as the superuser,
# in POSTGRES_DB). The passwords come from the environment (the Secret), never from this file.
set -eu
# The standby's copy (pg_basebackup) and streaming: replication connections of role replicator.
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
psql -v ON_ERROR_STOP=1 --no-psqlrc -U "$POSTGRES_USER" -d "$POSTGRES_DB" \
  -v cdc_password="$CDC_PASSWORD" -v replicator_password="$REPLICATOR_PASSWORD" <<'SQL'
-- The example application's table (replace with yours).
CREATE TABLE public.orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status text NOT NULL DEFAULT 'new',
    amount numeric(12, 2) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- cdc: streams and creates its failover slot (REPLICATION), reads the published tables.
CREATE ROLE cdc WITH LOGIN REPLICATION PASSWORD :'cdc_password';
GRANT SELECT ON ALL TABLES IN SCHEMA public TO cdc;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO cdc;
GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text, boolean) TO cdc;
-- The standby: copies the primary, streams from it through its slot, and synchronizes the
-- failover slots (its slot sync worker connects to this database: dbname in primary_conninfo).
CREATE ROLE replicator WITH LOGIN REPLICATION PASSWORD :'replicator_password';
CREATE PUBLICATION cdc_pub FOR TABLES IN SCHEMA public WITH (publish_via_partition_root = true);
SQL

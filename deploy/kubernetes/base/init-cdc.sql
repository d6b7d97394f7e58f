-- init-cdc.sql: what cdc needs from the database, run once by the postgres image when the data
-- directory is first initialised (/docker-entrypoint-initdb.d, as the superuser, in POSTGRES_DB).
-- The password comes from the environment (CDC_PASSWORD, from the Secret), never from this file.

-- The example application's table (replace with yours).
CREATE TABLE public.orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status text NOT NULL DEFAULT 'new',
    amount numeric(12, 2) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- cdc's role: least privilege. REPLICATION lets it stream and create its own slot (source.create
-- finds the publication below already there, so it creates nothing else); no CREATE on the
-- database, no table ownership, not a superuser.
\getenv cdc_password CDC_PASSWORD
CREATE ROLE cdc WITH LOGIN REPLICATION PASSWORD :'cdc_password';

-- SELECT on the published tables, including those created later by the role running this script.
GRANT SELECT ON ALL TABLES IN SCHEMA public TO cdc;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO cdc;

-- source.heartbeat writes a small logical message when the published tables are idle, so that the
-- slot keeps moving and does not pin WAL. PostgreSQL lets PUBLIC execute it by default; the grant
-- keeps the heartbeat working where a hardened database revoked that. PostgreSQL 17 added a fourth
-- argument (flush), so the grant names the function as this server has it.
DO $$
DECLARE f regprocedure;
BEGIN
    SELECT oid INTO STRICT f FROM pg_catalog.pg_proc
     WHERE proname = 'pg_logical_emit_message' AND pronamespace = 'pg_catalog'::regnamespace
       AND proargtypes[2] = 'text'::regtype;
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO cdc', f);
END $$;

-- The publication (creating one FOR TABLES IN SCHEMA needs a superuser): every table of public,
-- now and later; a partitioned table's changes under its own name.
CREATE PUBLICATION cdc_pub FOR TABLES IN SCHEMA public WITH (publish_via_partition_root = true);

#!/bin/sh
# start.sh: PostgreSQL 17 in pod pg-N (N is 0 or 1), with the settings of both roles; which one it
# plays is its data directory's (clone.sh makes a standby with standby.signal). Each names the
# other pod: as a standby it streams from it through its own physical slot standby_pg_N there, as
# a primary it waits for the other's slot before sending logical changes (synchronized_standby_slots),
# so that a promotion never hands cdc's consumers a change the promoted server lacks.
set -eu
ord=${HOSTNAME##*-}
other=$((1 - ord))
exec docker-entrypoint.sh postgres \
  -c wal_level=logical \
  -c max_replication_slots=10 \
  -c max_wal_senders=10 \
  -c max_slot_wal_keep_size=4GB \
  -c hot_standby=on \
  -c hot_standby_feedback=on \
  -c sync_replication_slots=on \
  -c "primary_slot_name=standby_pg_$ord" \
  -c "primary_conninfo=host=pg-$other.pg port=5432 user=replicator dbname=app application_name=pg-$ord passfile=/var/run/postgresql/.pgpass" \
  -c "synchronized_standby_slots=standby_pg_$other"

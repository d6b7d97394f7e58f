#!/bin/sh
# clone.sh: the init container of pod pg-N. Writes the replication password file; then, if this
# pod has no data directory yet and the other pod is a primary, copies it (pg_basebackup) as a hot
# standby streaming through its own physical slot standby_pg_N there. pg-0 with nothing to copy
# starts a new database (the image's initdb, then init-cdc.sh). A former primary whose partner was
# promoted meanwhile is refused: delete its volume, and it comes back as the new standby.
set -eu
ord=${HOSTNAME##*-}
other=$((1 - ord))
umask 077
printf '*:*:*:replicator:%s\n' "$REPLICATOR_PASSWORD" > /var/run/postgresql/.pgpass
export PGPASSFILE=/var/run/postgresql/.pgpass
primary() {
  [ "$(psql -h "pg-$other.pg" -U replicator -d app -XAtc 'select not pg_is_in_recovery()' 2>/dev/null)" = t ]
}
if [ -s "$PGDATA/PG_VERSION" ]; then
  if [ ! -e "$PGDATA/standby.signal" ] && primary; then
    echo "pg-$other is the primary, and this data directory is a former primary's (two primaries would" \
         "split the database): delete this pod's volume (PVC data-pg-$ord) and the pod, and it is" \
         "rebuilt as pg-$other's standby" >&2
    exit 1
  fi
  exit 0
fi
if ! primary; then
  [ "$ord" = 0 ] && exit 0
  echo "pg-$other is not a primary yet: waiting (the kubelet restarts this container)" >&2
  exit 1
fi
psql -h "pg-$other.pg" -U replicator -d app -XAtc \
  "select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = 'standby_pg_$ord' and not active"
pg_basebackup -h "pg-$other.pg" -U replicator -D "$PGDATA" -X stream -C -S "standby_pg_$ord" -R -c fast -P

#!/bin/sh
# Starts Patroni as the image's postgres user with the passwords from the Docker secrets: the
# replication (and pg_rewind) user's from /run/secrets/replication_password, the others are deploy/postgres-init's.
# Patroni reads PATRONI_* variables over its YAML file; the node's name and address come from
# the service (PATRONI_NAME). exec keeps Patroni as PID 1, so SIGTERM reaches it.
set -eu
if [ ! -s /run/secrets/replication_password ]; then
    echo "error: /run/secrets/replication_password is missing or unreadable: create deploy/secrets/replication_password (deploy/make-secrets.sh replication_password, docs/ha.md)" >&2
    exit 1
fi
: "${PATRONI_NAME:?set PATRONI_NAME to this node's name, which other nodes reach it by}"
PATRONI_REPLICATION_PASSWORD="$(cat /run/secrets/replication_password)"
PATRONI_REWIND_PASSWORD="$PATRONI_REPLICATION_PASSWORD"
PATRONI_POSTGRESQL_CONNECT_ADDRESS="${PATRONI_POSTGRESQL_CONNECT_ADDRESS:-$PATRONI_NAME:5432}"
PATRONI_RESTAPI_CONNECT_ADDRESS="${PATRONI_RESTAPI_CONNECT_ADDRESS:-$PATRONI_NAME:8008}"
export PATRONI_REPLICATION_PASSWORD PATRONI_REWIND_PASSWORD PATRONI_POSTGRESQL_CONNECT_ADDRESS PATRONI_RESTAPI_CONNECT_ADDRESS
mkdir -p "${PGDATA:-/var/lib/postgresql/data}" 2>/dev/null || :
chmod 700 "${PGDATA:-/var/lib/postgresql/data}" 2>/dev/null || :
exec "$@"

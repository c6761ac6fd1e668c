#!/bin/sh
# Patroni's post_bootstrap: runs once, on the node that initialised the cluster, as the
# superuser over the socket. It does what the official image's initdb hook does for the single
# Postgres: the database, then deploy/postgres-init (mounted at /docker-entrypoint-initdb.d).
set -eu
export PGHOST=/var/run/postgresql POSTGRES_USER=postgres POSTGRES_DB="${QW_DB_NAME:-qw}"
psql -v ON_ERROR_STOP=1 -U postgres -d postgres -c "CREATE DATABASE \"$POSTGRES_DB\""
for f in /docker-entrypoint-initdb.d/*.sh; do
    sh "$f"
done

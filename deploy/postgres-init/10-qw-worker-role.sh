#!/bin/sh
# Runs once, when Postgres initialises an empty data directory (the official image's
# /docker-entrypoint-initdb.d hook): the worker login role, with its password from the secret.
# Its grants come with migration 0018, applied by the orchestrator (the owner) right after.
set -eu
password_file="${QW_WORKER_PASSWORD_FILE:-/run/secrets/worker_db_password}"
if [ ! -s "$password_file" ]; then
    echo "error: the worker database password is missing: create deploy/secrets/worker_db_password (deploy/README.md)" >&2
    exit 1
fi
psql -v ON_ERROR_STOP=1 -v password="$(cat "$password_file")" --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
CREATE ROLE qw_worker LOGIN PASSWORD :'password';
SQL

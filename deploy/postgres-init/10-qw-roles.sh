#!/bin/sh
# Runs once, when Postgres initialises an empty data directory (the official image's
# /docker-entrypoint-initdb.d hook), as the superuser over the container's socket: the schema
# owner, which is not a superuser, and one login role per service kind. psql reads each password
# from its secret file itself (`\set ... `cat FILE``), so none is ever on a command line. The
# grants come with migration 0033, which the one-shot `migrate` service applies as the owner.
set -eu
for name in postgres_password orchestrator_db_password scheduler_db_password dashboard_db_password \
            worker_db_password metrics_db_password; do
    if [ ! -s "/run/secrets/$name" ]; then
        echo "error: /run/secrets/$name is missing or unreadable: create deploy/secrets/$name (deploy/make-secrets.sh, deploy/README.md)" >&2
        exit 1
    fi
done
psql -v ON_ERROR_STOP=1 -v owner="${QW_DB_OWNER:-qw}" -v dbname="$POSTGRES_DB" \
    --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
\set owner_password `cat /run/secrets/postgres_password`
\set orchestrator_password `cat /run/secrets/orchestrator_db_password`
\set scheduler_password `cat /run/secrets/scheduler_db_password`
\set dashboard_password `cat /run/secrets/dashboard_db_password`
\set worker_password `cat /run/secrets/worker_db_password`
\set metrics_password `cat /run/secrets/metrics_db_password`
-- The owner applies migrations and owns what they create (schema public too, as the database's
-- owner): it can change the schema, but it cannot run server-side programs or create roles.
CREATE ROLE :"owner" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'owner_password';
ALTER DATABASE :"dbname" OWNER TO :"owner";
CREATE ROLE qw_orchestrator LOGIN PASSWORD :'orchestrator_password';
CREATE ROLE qw_scheduler LOGIN PASSWORD :'scheduler_password';
CREATE ROLE qw_dashboard LOGIN PASSWORD :'dashboard_password';
CREATE ROLE qw_worker LOGIN PASSWORD :'worker_password';
CREATE ROLE qw_metrics LOGIN PASSWORD :'metrics_password';
-- The superuser keeps no password: it logs in only over this container's socket (peer, pg_hba.conf).
ALTER ROLE CURRENT_USER PASSWORD NULL;
SQL

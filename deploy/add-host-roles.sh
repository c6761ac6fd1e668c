#!/bin/sh
# Run on the head: login roles of one host's own, `qw_worker_<host>` (a member of qw_worker) and
# `qw_metrics_<host>` (a member of qw_metrics), with fresh passwords written to
# deploy/secrets/hosts/<host>/ (copy them to that host's deploy/secrets/). The host's .env then sets
#   QW_DB_WORKER_USER=qw_worker_<host>  QW_DB_METRICS_USER=qw_metrics_<host>
# and the head can lock that host out alone: ALTER ROLE qw_worker_<host> NOLOGIN.
# The passwords reach psql on its standard input, never on a command line.
#   deploy/add-host-roles.sh cpu1
set -eu
host="${1:?usage: deploy/add-host-roles.sh HOST (letters, digits, _)}"
case "$host" in
    *[!a-z0-9_]*) echo "error: host name '$host' must be lowercase letters, digits and _ (it becomes a role name)" >&2; exit 2 ;;
esac
secrets="${QW_SECRETS_DIR:-$(dirname "$0")/secrets}/hosts/$host"
umask 077
mkdir -p "$secrets"
sql=""
for kind in worker metrics; do
    file="$secrets/${kind}_db_password"
    [ -s "$file" ] || openssl rand -base64 24 > "$file"
    chgrp "${QW_SECRETS_GID:-10001}" "$file"
    chmod 0640 "$file"
    # A SQL literal: single quotes doubled (standard_conforming_strings is on).
    password="$(sed "s/'/''/g" "$file")"
    sql="$sql
DO \$\$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'qw_${kind}_$host') THEN
        CREATE ROLE qw_${kind}_$host LOGIN IN ROLE qw_$kind;
    END IF;
END \$\$;
ALTER ROLE qw_${kind}_$host LOGIN PASSWORD '$password';"
done
printf '%s\n' "$sql" | docker compose exec -T postgres sh -c 'psql -q -v ON_ERROR_STOP=1 -U postgres -d "$POSTGRES_DB"'
echo "qw_worker_$host and qw_metrics_$host can log in; their passwords are in $secrets/"

#!/bin/sh
# The stand-in for the official postgres image's entrypoint: the same contract (POSTGRES_USER,
# POSTGRES_PASSWORD[_FILE], POSTGRES_DB, /docker-entrypoint-initdb.d on an empty data directory),
# so compose.yaml and deploy/postgres-init run unchanged against it. Like the official one it
# runs the service's own `command:` (`postgres -c ssl=on ...`) and execs Postgres as PID 1, so
# SIGTERM/SIGINT reach it and `docker stop` shuts it down cleanly instead of killing it. Started
# as root it drops to postgres; started as postgres (`user: postgres`, no capabilities) it runs
# everything as itself, as the official entrypoint does.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- postgres "$@"   # flags alone are the server's, as in the official image
fi
if [ "$1" != postgres ]; then
    exec "$@"
fi
as_postgres="runuser -u postgres --"
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown -R postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
else
    as_postgres=""
    mkdir -p "$PGDATA" 2>/dev/null || :
    chmod 700 "$PGDATA" 2>/dev/null || :
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    password="${POSTGRES_PASSWORD:-}"
    if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
        password="$(cat "$POSTGRES_PASSWORD_FILE")"
    fi
    if [ -z "$password" ]; then
        echo "error: database is uninitialized and no superuser password is given: set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE" >&2
        exit 1
    fi
    export POSTGRES_USER="${POSTGRES_USER:-postgres}"
    export POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
    pwfile="$(mktemp)"
    printf '%s\n' "$password" > "$pwfile"
    [ -z "$as_postgres" ] || chown postgres "$pwfile"
    # The official image initialises UTF8 (its LANG); so does the stand-in, with glibc's C.UTF-8.
    # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of flags, as in the official image
    $as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 ${POSTGRES_INITDB_ARGS:-}
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    $as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) if [ -x "$f" ]; then "$f"; else . "$f"; fi ;;
            *.sql) psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -f "$f" ;;
        esac
    done
    $as_postgres pg_ctl -D "$PGDATA" -m fast -w stop
    echo "PostgreSQL init process complete; ready for start up."
fi
if [ -z "$as_postgres" ]; then
    exec "$@"
fi
# setpriv (util-linux, in every Debian) execs without staying behind as a parent, unlike runuser.
exec setpriv --reuid=postgres --regid=postgres --init-groups "$@"

#!/bin/sh
# Writes what PgBouncer reads from /tmp (a tmpfs: the root filesystem is read-only), then runs the
# command (pgbouncer in the foreground) as this process, so `docker stop`'s SIGINT reaches it.
#   /run/secrets/<role>.password   each role PgBouncer lets in: its auth file line, "role" "password"
#   PGBOUNCER_<SETTING>=value      a [pgbouncer] setting, e.g. PGBOUNCER_DEFAULT_POOL_SIZE=20;
#                                  included last by pgbouncer.ini, so it wins over the file
# PgBouncer needs each password itself: it answers the clients' SCRAM exchange and logs in to
# Postgres with SCRAM in turn. The file is readable by its own user alone and lives in memory.
set -eu
# Another command (`pgbouncer --version`, `psql`) runs as it is.
[ "${1:-}" = pgbouncer ] || exec "$@"
run=/tmp/pgbouncer
umask 077
mkdir -p "$run"
users="$run/userlist.txt.new"
: > "$users"
for secret in /run/secrets/*.password; do
    [ -e "$secret" ] || continue
    role=$(basename "$secret" .password)
    case $role in
        *[!a-z0-9_]*|"") echo "error: $secret: a role name is lower-case letters, digits and _" >&2; exit 2 ;;
    esac
    if [ ! -r "$secret" ] || [ ! -s "$secret" ]; then
        echo "error: $secret is missing, empty or unreadable (its group must be QW_SECRETS_GID; deploy/make-secrets.sh)" >&2
        exit 2
    fi
    # The file's first line; a double quote is doubled, as the auth file's format asks.
    password=$(head -n 1 "$secret" | sed 's/"/""/g')
    printf '"%s" "%s"\n' "$role" "$password" >> "$users"
done
if [ ! -s "$users" ]; then
    echo "error: no /run/secrets/<role>.password: PgBouncer would let no one in (deploy/compose.pooler.yaml)" >&2
    exit 2
fi
mv "$users" "$run/userlist.txt"
settings="$run/env.ini.new"
: > "$settings"
env | sed -n 's/^PGBOUNCER_\([A-Z0-9_]*\)=\(.*\)$/\1 \2/p' | while read -r name value; do
    printf '%s = %s\n' "$(echo "$name" | tr 'A-Z' 'a-z')" "$value" >> "$settings"
done
mv "$settings" "$run/env.ini"
exec "$@"

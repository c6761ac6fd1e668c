#!/bin/sh
# The secret files compose.yaml mounts, in deploy/secrets/ (or $QW_SECRETS_DIR): each one named
# that is missing gets a random password; every one named is made readable by its owner and by
# group $QW_SECRETS_GID (default 10001, the images' user; Postgres joins it too) and no one else.
#   deploy/make-secrets.sh                      the head's set
#   deploy/make-secrets.sh worker_db_password metrics_db_password
#                                               another host, after copying those two (or its own, deploy/add-host-roles.sh)
# Changing a file's group to one you are not in needs root: otherwise set QW_SECRETS_GID to your
# own group (id -g), here and in .env.
set -eu
dir="${QW_SECRETS_DIR:-$(dirname "$0")/secrets}"
gid="${QW_SECRETS_GID:-10001}"
if [ "$#" -eq 0 ]; then
    set -- postgres_password orchestrator_db_password scheduler_db_password dashboard_db_password \
           worker_db_password metrics_db_password dashboard_password
fi
umask 077
mkdir -p "$dir"
for name in "$@"; do
    [ -s "$dir/$name" ] || openssl rand -base64 24 > "$dir/$name"
    if ! chgrp "$gid" "$dir/$name" 2>/dev/null; then
        echo "error: cannot give $dir/$name to group $gid: run this with sudo, or set QW_SECRETS_GID=\$(id -g) here and in .env" >&2
        exit 1
    fi
    chmod 0640 "$dir/$name"
done

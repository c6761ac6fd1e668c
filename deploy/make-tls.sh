#!/bin/sh
# Makes a private CA and the head's Postgres server certificate (deploy/README.md, "TLS").
# Usage: deploy/make-tls.sh HEAD_NAME [NAME_OR_IP ...]   (as root: the key's owner must be root)
#   deploy/ca-private/ca.key  the CA's key: stays here, never mounted or copied
#   deploy/ca/ca.crt          the CA: copy it to every other host's deploy/ca/
#   deploy/tls/server.crt|key the head's certificate, for the names given, `postgres` and
#                             `pgbouncer` (the `pooler` profile serves it to its clients too)
# Run again with the same names and nothing changes; with other names the certificate is
# reissued from the same CA, so no host needs a new ca.crt.
set -eu

if [ $# -lt 1 ]; then
    echo "usage: $0 HEAD_NAME [NAME_OR_IP ...] (the names other hosts use in QW_DB_HOST)" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
tls_dir=${QW_PG_TLS_DIR:-$here/tls}
ca_dir=${QW_DB_CA_DIR:-$here/ca}
private_dir=${QW_CA_PRIVATE_DIR:-$here/ca-private}
# Postgres's group in the official image; it reads a root-owned key through it (mode 0640).
pg_gid=${QW_PG_GID:-999}
days=${QW_TLS_DAYS:-825}
if [ "$(id -u)" != 0 ]; then
    echo "$0: run it as root (sudo): Postgres accepts a group-readable key only when root owns it" >&2
    exit 2
fi

sans="DNS:postgres,DNS:pgbouncer"
for name in "$@"; do
    case $name in
        *:*) sans="$sans,IP:$name" ;;
        *[!0-9.]*) sans="$sans,DNS:$name" ;;
        *) sans="$sans,IP:$name" ;;
    esac
done

mkdir -p "$tls_dir" "$ca_dir" "$private_dir"
chmod 0700 "$private_dir"
umask 077
if [ ! -s "$private_dir/ca.key" ] || [ ! -s "$ca_dir/ca.crt" ]; then
    openssl req -x509 -newkey rsa:3072 -nodes -sha256 -days 3650 -subj "/CN=queue_workflows CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout "$private_dir/ca.key" -out "$ca_dir/ca.crt" 2>/dev/null
    rm -f "$tls_dir/server.crt"
fi
chmod 0600 "$private_dir/ca.key"
chmod 0644 "$ca_dir/ca.crt"

current_sans() {
    openssl x509 -in "$tls_dir/server.crt" -noout -ext subjectAltName 2>/dev/null | tail -n +2 \
        | sed -e 's/IP Address:/IP:/g' -e 's/, /,/g' -e 's/^ *//'
}
if [ -s "$tls_dir/server.key" ] && [ -s "$tls_dir/server.crt" ] && [ "$(current_sans)" = "$sans" ] \
    && openssl verify -CAfile "$ca_dir/ca.crt" "$tls_dir/server.crt" >/dev/null 2>&1; then
    echo "$tls_dir/server.crt is current ($sans)"
else
    [ -s "$tls_dir/server.key" ] || openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:3072 -out "$tls_dir/server.key" 2>/dev/null
    csr=$(mktemp)
    ext=$(mktemp)
    trap 'rm -f "$csr" "$ext"' EXIT
    printf 'subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' "$sans" > "$ext"
    openssl req -new -key "$tls_dir/server.key" -subj "/CN=$1" -out "$csr"
    openssl x509 -req -in "$csr" -CA "$ca_dir/ca.crt" -CAkey "$private_dir/ca.key" -CAcreateserial \
        -CAserial "$private_dir/ca.srl" -days "$days" -sha256 -extfile "$ext" -out "$tls_dir/server.crt" 2>/dev/null
    echo "wrote $tls_dir/server.crt for $sans"
fi
chown 0:"$pg_gid" "$tls_dir/server.key"
chmod 0640 "$tls_dir/server.key"
chmod 0644 "$tls_dir/server.crt"
echo "copy $ca_dir/ca.crt to deploy/ca/ on every other host"

#!/usr/bin/env bash
# Stand-in base images for a Docker engine that cannot pull: one debootstrapped Debian bookworm
# with Python 3.11, tagged with every base name the Dockerfile uses, plus a Postgres that keeps the
# official image's contract. The rootfs is cached in $QW_CI_CACHE, so a second run only imports.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${QW_CI_CACHE:-/var/cache/qw-ci}"
mirror="${QW_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# The names docker/Dockerfile and compose.yaml default to; override them together.
python_base="${QW_PYTHON_BASE:-python:3.11-slim-bookworm}"
cuda_base="${QW_CUDA_BASE:-nvidia/cuda:12.6.3-runtime-ubuntu24.04}"
rocm_base="${QW_ROCM_BASE:-rocm/dev-ubuntu-24.04:6.4}"
postgres_image="${QW_POSTGRES_IMAGE:-postgres:16-bookworm}"

have() { docker image inspect "$1" >/dev/null 2>&1; }

mkdir -p "$cache"
if ! have qw-standin/bookworm; then
    tarball="$cache/bookworm-python.tar"
    if [ ! -s "$tarball" ]; then
        rootfs="$(mktemp -d "$cache/rootfs.XXXXXX")"
        debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log"
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -cf "$tarball.tmp" .
        mv "$tarball.tmp" "$tarball"
        rm -rf "$rootfs"
    fi
    docker import "$tarball" qw-standin/bookworm >/dev/null
fi
for name in "$python_base" "$cuda_base" "$rocm_base"; do
    have "$name" || docker tag qw-standin/bookworm "$name"
done
# The stand-in Postgres is rebuilt whenever its recipe changes: images and the cache carry the
# recipe's hash, so a machine that kept an older stand-in (docker engine state, $QW_CI_CACHE) does
# not test against it. An image without the label that is not a stand-in came from a registry.
recipe="$(cat "$here/standin/postgres.Dockerfile" "$here/standin/postgres-entrypoint.sh" | sha256sum | cut -c1-16)"
standin_label() { docker image inspect -f '{{index .Config.Labels "qw.standin"}}' "$1" 2>/dev/null || true; }
is_old_standin() { docker image inspect -f '{{join .Config.Env " "}}' "$1" 2>/dev/null | grep -q '/usr/lib/postgresql/15/bin'; }
if ! have "$postgres_image" || { [ "$(standin_label "$postgres_image")" != "$recipe" ] && is_old_standin "$postgres_image"; }; then
    if [ "$(standin_label qw-standin/postgres)" != "$recipe" ]; then
        if [ -s "$cache/postgres-$recipe.tar" ]; then
            docker load -i "$cache/postgres-$recipe.tar" >/dev/null
        else
            docker build --network host -q --label "qw.standin=$recipe" -t qw-standin/postgres \
                -f "$here/standin/postgres.Dockerfile" "$here/standin" >/dev/null
            rm -f "$cache"/postgres*.tar
            docker save -o "$cache/postgres-$recipe.tar" qw-standin/postgres
        fi
    fi
    docker tag qw-standin/postgres "$postgres_image"
fi
echo "stand-in bases: $python_base $cuda_base $rocm_base $postgres_image"

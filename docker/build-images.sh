#!/usr/bin/env bash
# Build every service image from docker/Dockerfile, tagged as compose.yaml names them
# ($QW_IMAGE_PREFIX/<target>:$QW_IMAGE_TAG). Works with the classic builder too (no buildx):
# each target reuses the cached wheel and virtualenv stages, so the engine is built once.
#   docker/build-images.sh [target ...]      (default: all seven)
# Extra `docker build` flags go in QW_BUILD_FLAGS (e.g. "--network host --build-arg PYTHON_BASE=...").
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${QW_IMAGE_PREFIX:-queue-workflows}"
tag="${QW_IMAGE_TAG:-latest}"
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(orchestrator scheduler cpu-worker hw-metrics dashboard gpu-worker-cuda gpu-worker-rocm)
fi
for target in "${targets[@]}"; do
    # shellcheck disable=SC2086 # QW_BUILD_FLAGS is a list of flags
    docker build ${QW_BUILD_FLAGS:-} -q -f docker/Dockerfile --target "$target" -t "$prefix/$target:$tag" . >/dev/null
    echo "$prefix/$target:$tag"
done

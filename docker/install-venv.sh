#!/bin/sh
# Install the engine's wheel (built once, in /dist) with the extras given as $1 into /opt/qw.
# A wheelhouse with wheels in it means no index at all (air-gapped sites); otherwise pip's index.
set -eu
extras="${1:-}"
from_wheelhouse=""
if ls /wheelhouse/*.whl >/dev/null 2>&1; then
    from_wheelhouse="--no-index --find-links /wheelhouse"
fi
python -m venv /opt/qw
wheel="$(ls /dist/queue_workflows-*.whl)"
# shellcheck disable=SC2086 # from_wheelhouse is two words or none
/opt/qw/bin/pip install --no-cache-dir --disable-pip-version-check $from_wheelhouse "${wheel}${extras:+[$extras]}"
/opt/qw/bin/pip uninstall -y --disable-pip-version-check pip setuptools >/dev/null
find /opt/qw -name __pycache__ -prune -exec rm -rf {} +

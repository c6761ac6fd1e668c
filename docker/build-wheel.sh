#!/bin/sh
# Build the engine's wheel into /dist, once per build, with setuptools and wheel from the
# wheelhouse when it has them (air-gapped sites), else from pip's index.
set -eu
from_wheelhouse=""
if ls /wheelhouse/*.whl >/dev/null 2>&1; then
    from_wheelhouse="--no-index --find-links /wheelhouse"
fi
python -m venv /opt/build
# shellcheck disable=SC2086 # from_wheelhouse is two words or none
/opt/build/bin/pip install --no-cache-dir --disable-pip-version-check $from_wheelhouse "setuptools>=64" wheel
/opt/build/bin/pip wheel --no-deps --no-build-isolation --no-cache-dir --disable-pip-version-check -w /dist .
rm -rf /opt/build

#!/bin/sh
# The unit tier: pure tests on the checkout's own code. No root, no install into
# /opt; the Python dependencies live in a venv made once (CONFINE_DEV_VENV, default
# .venv in the checkout).
set -eu
cd "$(dirname "$0")/.."
venv=${CONFINE_DEV_VENV:-.venv}
if [ ! -x "$venv/bin/pytest" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q click PyYAML pyseccomp landlockpy pytest ruff mypy
fi
PYTHONPATH=$(pwd) exec "$venv/bin/pytest" -p no:cacheprovider -q -m unit tests/unit "$@"

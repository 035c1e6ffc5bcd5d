#!/bin/sh
# ./test.sh [PYTEST ARGS]   install confine and its test tools, lint, run the whole suite.
#                           Run as root (CI does): tests run confined processes both as
#                           root and as an unprivileged user that this script creates.
# ./test.sh --fast [ARGS]   the unit tier only: the checkout's code, no root, no install
#                           into /opt (a venv with the Python dependencies is made once in
#                           .venv), well under 30 seconds.
# The whole suite includes the host-condition matrix (tests/conditions, marker
# `conditions`) in its bounded form: 6 conditions (Landlock ABI 1, 4, 5; user
# namespaces refused like Docker's seccomp profile, alone and with ABI 1, 5), as root
# and unprivileged, about 2 minutes on 2 cores. CONFINE_TEST_CONDITIONS=all runs all
# 13; `-m "not conditions"` leaves the matrix out.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if [ "${1:-}" = "--fast" ]; then
    shift
    exec ./scripts/fast-tests.sh "$@"
fi
if [ "$(id -u)" = 0 ]; then
    ./scripts/test-deps.sh
fi
CONFINE_NO_LINK=1 CONFINE_PREFIX=${CONFINE_TEST_PREFIX:-/opt/confine-test} CONFINE_EXTRAS=test ./install.sh
export CONFINE_TEST_PREFIX=${CONFINE_TEST_PREFIX:-/opt/confine-test}
"${CONFINE_TEST_PREFIX}/bin/ruff" check .
"${CONFINE_TEST_PREFIX}/bin/mypy"
# The installed package (not the checkout) is what the tests import and run.
exec "${CONFINE_TEST_PREFIX}/bin/pytest" -p no:cacheprovider -q "$@"

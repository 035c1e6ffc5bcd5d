#!/bin/sh
# Install confine and its test tools, then run the whole test suite.
# Run as root (CI does): tests run confined processes both as root and as an
# unprivileged user that this script creates.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if [ "$(id -u)" = 0 ]; then
    ./scripts/test-deps.sh
fi
CONFINE_NO_LINK=1 CONFINE_PREFIX=${CONFINE_TEST_PREFIX:-/opt/confine-test} CONFINE_EXTRAS=test ./install.sh
export CONFINE_TEST_PREFIX=${CONFINE_TEST_PREFIX:-/opt/confine-test}
# The installed package (not the checkout) is what the tests import and run.

exec "${CONFINE_TEST_PREFIX}/bin/pytest" -p no:cacheprovider -q "$@"

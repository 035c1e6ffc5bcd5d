#!/bin/sh
# System packages and accounts the tests need (root only; Debian/Ubuntu).
set -eu
pkgs=""
# gcc + libc6-dev: tests/e2e/test_native_hop.py builds bench/native/hop.c
for p in git python3-venv libseccomp2 tmux curl openssh-client openssh-server gcc libc6-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || pkgs="$pkgs $p"
done
if [ -n "$pkgs" ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null
fi
# AppArmor/SELinux/systemd tooling for the exporter tests.
if [ -x "$(dirname "$0")/test-deps-export.sh" ]; then
    "$(dirname "$0")/test-deps-export.sh"
fi
# The unprivileged account tests run as (no password, no groups).
id confine-test >/dev/null 2>&1 || useradd --create-home --shell /bin/bash confine-test
# The real agent CLIs (npm, pinned) for tests/e2e/agents.
"$(dirname "$0")/test-deps-agents.sh"

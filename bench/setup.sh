#!/bin/sh
# bench/setup.sh: install what bench/run.py compares against, as root.
#   - bubblewrap and firejail from Debian's packages (apt-get), and gcc + libc6-dev where
#     there is no cc (bench/native_hop.py compiles bench/native/hop.c);
#   - sandlock from PyPI into a scratch venv ($CACHE/sandlock), if PyPI has it;
#   - the test account confine-test (as tests/ create it);
#   - this checkout's confine, installed the way install.sh does it, into $CACHE/confine
#     (run.py --install repeats only this step after a code change).
# Nothing here is needed for the measurements themselves to stay offline: run.py sends
# no traffic but loopback. CONFINE_BENCH_CACHE overrides the cache (default
# /var/tmp/confine-bench).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${CONFINE_BENCH_CACHE:-/var/tmp/confine-bench}
if [ "$(id -u)" != 0 ]; then
    echo "bench/setup.sh: run as root (apt-get, useradd)" >&2
    exit 1
fi
mkdir -p "$cache" && chmod 0755 "$cache"

if command -v apt-get >/dev/null; then
    missing=""
    command -v bwrap >/dev/null || missing="$missing bubblewrap"
    command -v firejail >/dev/null || missing="$missing firejail"
    # bench/native_hop.py builds its prototype (bench/native/hop.c) with cc
    command -v cc >/dev/null || missing="$missing gcc libc6-dev"
    if [ -n "$missing" ]; then
        apt-get update -qq
        for p in $missing; do
            if apt-cache policy "$p" | grep -q 'Candidate: [0-9]'; then
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
                echo "setup: installed $p"
            else
                echo "setup: $p has no Debian candidate here: its rows will say 'not installed'"
            fi
        done
    fi
else
    echo "setup: no apt-get: bubblewrap and firejail must be installed by hand"
fi

id confine-test >/dev/null 2>&1 || { useradd --create-home confine-test && echo "setup: created confine-test"; }

py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
if [ ! -x "$cache/sandlock/bin/python" ] || ! "$cache/sandlock/bin/python" -c 'import sandlock' 2>/dev/null; then
    if "$py" -m pip index versions sandlock 2>/dev/null | grep -q '^sandlock '; then
        "$py" -m venv "$cache/sandlock"
        "$cache/sandlock/bin/python" -m pip install -q sandlock && echo "setup: sandlock installed in $cache/sandlock"
        chmod -R a+rX "$cache/sandlock"
    else
        echo "setup: sandlock is not on PyPI here: its rows will say 'not installed'"
    fi
fi

CONFINE_NO_LINK=1 CONFINE_PREFIX="$cache/confine" "$here/install.sh"
"$py" "$here/bench/run.py" --stamp-install

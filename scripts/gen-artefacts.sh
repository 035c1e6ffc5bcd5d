#!/bin/sh
# Regenerate apparmor/ and selinux/ from profiles/default.yaml, and confine/policy/_shipped.py
# from profiles/*.yaml (tests fail on drift).
# Uses the checkout's code with a Python that has confine's dependencies:
# $PYTHON, else an installed confine's own, else python3.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
for py in "${PYTHON:-}" /opt/confine/bin/python "$HOME/.local/share/confine/bin/python" python3; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 && "$py" -c 'import click, yaml' 2>/dev/null && break
done
cd "$repo"
PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m confine.export.artefacts "$repo"

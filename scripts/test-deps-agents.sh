#!/bin/sh
# The agent CLIs tests/e2e/agents runs end to end (issue 22): installed from npm at the
# pinned versions below into one world-readable prefix, so root and the unprivileged test
# account run the same files. Idempotent: nothing is fetched when the pinned versions are
# there. Where npm or its registry cannot be reached this says so and exits 0: the tests
# then skip, naming this script and the reason (tests/e2e/agents/conftest.py).
set -eu
CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
prefix=${CONFINE_AGENTS_NPM_PREFIX:-/opt/confine-test-agents-npm}
want="@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION @openai/codex@$CODEX_VERSION"
stamp="$prefix/.pinned"
# An account of their own: the fresh-HOME cases empty its home, which no other test uses.
id confine-agent >/dev/null 2>&1 || useradd --create-home --shell /bin/bash confine-agent
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
        && [ -x "$prefix/bin/claude" ] && [ -x "$prefix/bin/codex" ]; then
    exit 0
fi
if ! command -v npm >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    # a fresh Debian: node and npm from Debian's own packages
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) \
        >/dev/null 2>&1 || true
fi
if ! command -v npm >/dev/null; then
    echo "test-deps-agents.sh: npm not found and not installable: the agent CLI tests will skip" >&2
    exit 0
fi
mkdir -p "$prefix"
# shellcheck disable=SC2086  # two package specs, split on purpose
if ! npm install -g --no-fund --no-audit --loglevel=error --prefix "$prefix" $want >/dev/null; then
    echo "test-deps-agents.sh: npm install $want failed: the agent CLI tests will skip" >&2
    exit 0
fi
chmod -R a+rX "$prefix"
printf '%s' "$want" > "$stamp"

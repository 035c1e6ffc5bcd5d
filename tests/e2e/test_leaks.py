"""Small leaks of the launching session (issue 10, item 16, second half).

The launcher's session keyring: a key the user's shell put there must not be
listed (by name) in /proc/keys inside. The control: the same /proc/keys read
by the launcher itself, just before it execs confine, lists the key.
Without namespaces, started by the user, the key is the agent's own uid's:
the kernel lists it to its owner whatever the keyring, and there is no
private /proc to cover /proc/keys in (keyctl itself is denied by seccomp):
that combination is a documented residual, not tested as blocked.
"""
from __future__ import annotations

import secrets
import textwrap

import pytest
from conftest import CONFINE, PY

pytestmark = pytest.mark.e2e

# Runs as the launching user, then becomes confine: a fresh session keyring
# holding one named key, as a login session would have.
OUTER = textwrap.dedent("""
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    NAME = sys.argv[1]
    assert libc.syscall(250, 1, b"confine-test-session") >= 0      # join a named session
    serial = libc.syscall(248, b"user", NAME.encode(), b"secret-payload", 14,
                          ctypes.c_long(-3))                           # add_key(..., @s)
    assert serial >= 0, ctypes.get_errno()
    with open("/proc/keys") as f:
        print("outside", NAME in f.read(), flush=True)
    os.execv(sys.argv[2], sys.argv[2:])
""")

INNER = "import sys; print('inside', sys.argv[1] in open('/proc/keys').read())"


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_launcher_session_keyring_is_not_visible(sandbox, layers):
    if layers == "landlock" and sandbox.mode == "user":
        pytest.skip("the user's own key, no private /proc: documented residual")
    sb = sandbox.without_namespaces() if layers == "landlock" else sandbox
    name = "confine-test-key-" + secrets.token_hex(4)
    full = sb.exec_cmd([PY, "-c", INNER, name])
    at = full.index(CONFINE)
    cmd = full[:at] + [PY, "-c", OUTER, name] + full[at:]
    import subprocess
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=sb.workdir)
    assert p.returncode == 0, p.stderr
    assert "outside True" in p.stdout           # control: the launcher's keyring has it
    assert "inside False" in p.stdout, p.stdout

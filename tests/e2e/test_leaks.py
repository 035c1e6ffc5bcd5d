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

import os
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


NET_BODY = r'''
def sockets():
    out = []
    for name in ("tcp", "tcp6", "unix"):
        try:
            out += open("/proc/net/" + name).read().splitlines()[1:]
        except OSError:
            pass
    return out
rows = sockets()
R["listener visible"] = any(P["port_hex"] in r for r in rows)
R["abstract visible"] = any(P["abstract"] in r for r in rows)
R["interfaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
done()
'''


def test_host_network_tables_not_visible(sandbox):
    """The host's /proc/net (listening sockets, abstract socket names, interfaces)
    is not visible under a profile with no TCP port: the agent has a network
    namespace of its own with nothing but lo. Control: outside, the same reads
    show the test's own listener and abstract socket."""
    import socket
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(1)
    name = "confine-leak-%d" % os.getpid()
    ab = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ab.bind(b"\0" + name.encode())
    ab.listen(1)
    params = {"port_hex": ":%04X" % tcp.getsockname()[1], "abstract": name}
    try:
        p, inside = sandbox.probe(NET_BODY, params)
        assert inside is not None, p.stderr
        assert inside["listener visible"] is False and inside["abstract visible"] is False, inside
        assert inside["interfaces"] == ["lo"], inside
        _, outside = sandbox.outside_probe(NET_BODY, params)
        assert outside["listener visible"] is True and outside["abstract visible"] is True, outside
    finally:
        tcp.close()
        ab.close()

"""Device ioctls below Landlock ABI 5 (no IOCTL_DEV right): the nodev host view.

Ubuntu 22.04 (ABI 1), Debian 12 (ABI 2/3) and Ubuntu 24.04 (ABI 4) have no
Landlock right for device ioctls. A device node the agent can open through a
read or write grant (a root-made copy of a root filesystem in the workdir, a
node under a read grant) would let an ioctl reach its driver. With a mount
namespace every mount of the agent's view is nodev except binds of the
profile's `devices`, so such a node cannot be opened at all, while the granted
devices (/dev/null, /dev/urandom, new pseudo-terminals) work as before.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest
from conftest import PY, probe_code

ABI = "CONFINE_TEST_LANDLOCK_ABI_MAX={}".format

BODY = r'''
import fcntl, pty, termios
def ioctl(path):
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(8))
    finally:
        os.close(fd)
def opened(path):
    os.close(os.open(path, os.O_RDONLY))
for name, path in P["nodes"].items():
    attempt("open " + name, lambda p=path: opened(p))
    attempt("ioctl " + name, lambda p=path: ioctl(p))
attempt("ioctl /dev/null", lambda: ioctl("/dev/null"))
def write(path):
    with open(path, "w") as f:
        f.write("x")
def urandom():
    with open("/dev/urandom", "rb") as f:
        assert len(f.read(4)) == 4
attempt("write /dev/null", lambda: write("/dev/null"))
attempt("read /dev/urandom", urandom)
def newpty():
    m, s = pty.openpty()
    fcntl.ioctl(s, termios.TIOCGWINSZ, bytes(8))
    os.close(m); os.close(s)
attempt("openpty", newpty)
attempt("write workdir", lambda: write("w.txt"))
done()
'''


@pytest.fixture
def nodes(sandbox):
    """A terminal node (5,0: /dev/tty) and a null node (1,3) in the workdir, and a
    terminal node in a read-only directory the run is given with --read."""
    ro = tempfile.mkdtemp(prefix="confine-devro-", dir="/tmp")
    os.chmod(ro, 0o755)
    made = {"tty in workdir": os.path.join(sandbox.workdir, "tty"),
            "null in workdir": os.path.join(sandbox.workdir, "null"),
            "tty under a read grant": os.path.join(ro, "tty")}
    for name, path in made.items():
        os.mknod(path, 0o20666, os.makedev(5, 0) if "tty" in name else os.makedev(1, 3))
        os.chmod(path, 0o666)
    yield ro, made
    shutil.rmtree(ro, ignore_errors=True)


def _run(sandbox, ro, made, abi):
    env = [ABI(abi)]
    p = sandbox.run([PY, "-c", probe_code(BODY, {"nodes": made})], "--read", ro, env_extra=env)
    r = json.loads(p.stdout.splitlines()[-1]) if p.stdout.strip() else None
    assert r is not None, (p.returncode, p.stderr)
    return p, r


@pytest.mark.parametrize("abi", [1, 4])
def test_device_nodes_unopenable_below_abi_5(sandbox, nodes, abi):
    """No flag: the default profile runs at ABI 1 and 4 with a mount namespace, and
    no device node outside `devices` opens (EACCES: nodev); granted devices and new
    pseudo-terminals work (the controls: their ioctls reach the driver)."""
    ro, made = nodes
    d = json.loads(sandbox.run(["true"], "--dry-run", "--json", env_extra=[ABI(abi)]).stdout)
    assert d["mechanisms"]["landlock.ioctl_dev"].startswith("nodev host view"), d["mechanisms"]
    assert "landlock.ioctl_dev" not in {m["feature"] for m in d["missing"]}
    p, r = _run(sandbox, ro, made, abi)
    assert p.returncode == 0, p.stderr
    assert "degraded" not in p.stderr, p.stderr
    for name in made:
        assert r["open " + name] == "EACCES", (name, r)
        assert r["ioctl " + name] == "EACCES", (name, r)
    assert r["ioctl /dev/null"] == "ENOTTY", r      # reached the driver
    assert r["write /dev/null"] == "ok", r
    assert r["read /dev/urandom"] == "ok", r
    assert r["openpty"] == "ok", r
    assert r["write workdir"] == "ok", r


def test_device_nodes_open_outside_and_ioctl_denied_by_landlock_at_abi_7(sandbox, nodes):
    """The control for the nodes themselves: unconfined the null node opens and its
    ioctl reaches the driver (ENOTTY); confined on this kernel (IOCTL_DEV) it opens
    but the ioctl is refused by Landlock."""
    ro, made = nodes
    body = BODY
    _, outside = sandbox.outside_probe(body, {"nodes": made})
    assert outside["open null in workdir"] == "ok", outside
    assert outside["ioctl null in workdir"] == "ENOTTY", outside
    p, r = _run(sandbox, ro, made, 7)
    assert r["open null in workdir"] == "ok", r
    assert r["ioctl null in workdir"] == "EACCES", r
    assert r["ioctl /dev/null"] == "ENOTTY", r

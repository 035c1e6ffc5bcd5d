"""A container on an older kernel: no user namespaces (Docker's default seccomp
profile, reproduced by tests/conditions/launcher.py) AND Landlock below ABI 6.
No namespace can replace the missing Landlock rights there, so seccomp and the
supervisor do (plan/features.py NO_NS_REPLACEMENTS), and the default profile
runs with no flag:

* signal scoping (ABI 6): the kill family is judged by the supervisor;
* abstract unix socket scoping (ABI 6): abstract addresses refused;
* device ioctls (ABI 5): seccomp's ioctl allowlist;
* truncate (ABI 3): the broker judges truncate(2) and O_TRUNC opens.

Each is attacked from inside, as root and as the test account, with the control
(the same attempt unconfined) beside it.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
from conftest import PREFIX, PY, probe_code

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(os.path.dirname(HERE), "conditions", "launcher.py")
VENV_PY = os.path.join(PREFIX, "bin", "python")


def _docker_like(sandbox, abi: int):
    sandbox.wrap = [VENV_PY, LAUNCHER, "--no-userns", "--abi", str(abi), "--"]
    sandbox.layers = "landlock"
    return sandbox


def _probe(sandbox, body: str, params: dict):
    p = sandbox.run([PY, "-c", probe_code(body, params)])
    r = json.loads(p.stdout.splitlines()[-1]) if p.stdout.strip() else None
    assert r is not None, (p.returncode, p.stderr)
    assert "degraded" not in p.stderr and "NOT enforced" not in p.stderr, p.stderr
    return p, r


@pytest.mark.parametrize("abi", [2, 5])
def test_default_profile_runs_with_no_flag(sandbox, abi):
    sb = _docker_like(sandbox, abi)
    d = json.loads(sb.run(["true"], "--dry-run", "--json").stdout)
    assert d["missing"] == [], d["missing"]
    mech = d["mechanisms"]
    assert mech["landlock.scope_signal"].startswith("mediated signals"), mech
    assert mech["landlock.scope_abstract_unix"].startswith("abstract sockets refused"), mech
    if abi < 5:
        assert mech["landlock.ioctl_dev"].startswith("seccomp ioctl allowlist"), mech
    if abi < 3:
        assert mech["landlock.truncate"].startswith("broker mediation"), mech
    p = sb.run(["true"])
    assert p.returncode == 0 and "degraded" not in p.stderr, p.stderr


SIGNALS = r'''
import fcntl, subprocess, threading, time
out = P["pid"]
attempt("kill outsider", lambda: os.kill(out, 0))
attempt("kill outsider TERM", lambda: os.kill(out, 15))
attempt("pidfd outsider", lambda: signal.pidfd_send_signal(os.pidfd_open(out), 0))
R["tgkill outsider"] = sysc(234 if os.uname().machine == "x86_64" else 131, out, out, 0)
attempt("killpg outsider", lambda: os.killpg(os.getpgid(out), 0))
s = socket.socket(socket.AF_UNIX)
attempt("F_SETOWN outsider", lambda: [fcntl.fcntl(s, fcntl.F_SETOWN, out)] and None)
attempt("F_SETOWN self", lambda: [fcntl.fcntl(s, fcntl.F_SETOWN, os.getpid())] and None)
child = subprocess.Popen(["sleep", "30"])
attempt("kill own child", lambda: os.kill(child.pid, 0))
attempt("pidfd own child", lambda: signal.pidfd_send_signal(os.pidfd_open(child.pid), 15))
R["own child status"] = child.wait()
grp = subprocess.Popen(["sleep", "30"], start_new_session=True)
attempt("killpg own group", lambda: os.killpg(grp.pid, 15))
R["own group status"] = grp.wait()
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
attempt("raise", lambda: signal.raise_signal(signal.SIGUSR1))
t = threading.Thread(target=time.sleep, args=(0.5,)); t.start()
attempt("pthread_kill own thread", lambda: signal.pthread_kill(t.ident, 0))
t.join()
R["handled"] = got
done()
'''


@pytest.fixture
def outsider(test_user):
    """`sleep` as the test account, outside, alone in a session and process group of
    its own (so a group signal aimed at it reaches nothing of the run)."""
    p = subprocess.Popen(["setpriv", f"--reuid={test_user.pw_uid}", f"--regid={test_user.pw_gid}",
                          "--clear-groups", "--", "/bin/sleep", "300"], start_new_session=True)
    yield p.pid
    p.kill()
    p.wait()


@pytest.mark.parametrize("abi", [2, 5])
def test_signals_judged_by_the_supervisor(sandbox, outsider, abi):
    outside_sleeper = outsider
    sb = _docker_like(sandbox, abi)
    _, r = _probe(sb, SIGNALS, {"pid": outside_sleeper})
    for k in ("kill outsider", "kill outsider TERM", "pidfd outsider", "tgkill outsider",
              "killpg outsider", "F_SETOWN outsider"):
        assert r[k] == "EPERM", (k, r)
    for k in ("F_SETOWN self", "kill own child", "pidfd own child", "killpg own group",
              "raise", "pthread_kill own thread"):
        assert r[k] == "ok", (k, r)
    assert r["own child status"] == -15 and r["own group status"] == -15, r
    assert r["handled"] == [1], r
    os.kill(outside_sleeper, 0)           # still there
    # control: unconfined, the same account signals it
    _, outside = sb.outside_probe('attempt("kill", lambda: os.kill(P["pid"], 0)); done()',
                                  {"pid": outside_sleeper})
    assert outside == {"kill": "ok"}, outside


ABSTRACT = r'''
def conn(name):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(name)
    finally:
        s.close()
attempt("host abstract", lambda: conn(P["name"]))
def dgram(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", name)
    finally:
        s.close()
attempt("host abstract dgram", lambda: dgram(P["dname"]))
def pathname():
    l = socket.socket(socket.AF_UNIX); l.bind("s.sock"); l.listen()
    conn("s.sock")
attempt("workdir socket", pathname)
done()
'''


def test_abstract_sockets_refused(sandbox, test_user):
    sb = _docker_like(sandbox, 5)
    name, dname = "\0confine-test-abs-%d" % os.getpid(), "\0confine-test-absd-%d" % os.getpid()
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(name)
    srv.listen(8)
    ds = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ds.bind(dname)
    try:
        _, r = _probe(sb, ABSTRACT, {"name": name, "dname": dname})
        assert r["host abstract"] == "EPERM" and r["host abstract dgram"] == "EPERM", r
        # the workdir's pathname socket needs pidfd_getfd for the broker (Docker's
        # profile refuses it): only said, never weaker
        _, outside = sb.outside_probe(ABSTRACT.replace('attempt("workdir socket", pathname)\n', ""),
                                      {"name": name, "dname": dname})
        assert outside["host abstract"] == "ok" and outside["host abstract dgram"] == "ok", outside
    finally:
        srv.close()
        ds.close()


IOCTLS = r'''
import fcntl, termios
def ioc(path, req):
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.ioctl(fd, req, bytes(8))
    finally:
        os.close(fd)
attempt("node unknown", lambda: ioc(P["node"], 0x1234))
attempt("node BLKGETSIZE64", lambda: ioc(P["node"], 0x80081272))
attempt("devnull TIOCGWINSZ", lambda: ioc("/dev/null", termios.TIOCGWINSZ))
r, w = os.pipe()
attempt("pipe FIONREAD", lambda: [fcntl.ioctl(r, termios.FIONREAD, bytes(4))] and None)
done()
'''


def test_ioctls_outside_the_allowlist_refused(sandbox):
    sb = _docker_like(sandbox, 4)
    node = os.path.join(sb.workdir, "nullnode")
    os.mknod(node, 0o20666, os.makedev(1, 3))
    os.chmod(node, 0o666)
    _, r = _probe(sb, IOCTLS, {"node": node})
    assert r["node unknown"] == "EACCES" and r["node BLKGETSIZE64"] == "EACCES", r
    assert r["devnull TIOCGWINSZ"] == "ENOTTY", r          # allowed: reached the driver
    assert r["pipe FIONREAD"] == "ok", r
    _, outside = sb.outside_probe(IOCTLS, {"node": node})
    assert outside["node unknown"] == "ENOTTY", outside     # the control: the driver answers


TRUNC = r'''
attempt("truncate outside", lambda: os.truncate(P["victim"], 0))
attempt("O_TRUNC read-only outside", lambda: os.close(os.open(P["victim"], os.O_RDONLY | os.O_TRUNC)))
with open("w.txt", "w") as f:
    f.write("abc")
attempt("truncate inside", lambda: os.truncate("w.txt", 1))
attempt("O_TRUNC read-only inside", lambda: os.close(os.open("w.txt", os.O_RDONLY | os.O_TRUNC)))
R["inside size"] = os.path.getsize("w.txt")
done()
'''


def test_truncate_judged_by_the_broker(sandbox):
    sb = _docker_like(sandbox, 2)
    victim = os.path.join(sb.home, ".confine-trunc-victim-noext")
    with open(victim, "w") as f:
        f.write("keep me")
    os.chown(victim, sb.agent.pw_uid, sb.agent.pw_gid)
    try:
        _, r = _probe(sb, TRUNC, {"victim": victim})
        assert r["truncate outside"] == "EROFS" and r["O_TRUNC read-only outside"] == "EROFS", r
        assert r["truncate inside"] == "ok" and r["O_TRUNC read-only inside"] == "ok", r
        assert r["inside size"] == 0, r
        with open(victim) as f:
            assert f.read() == "keep me"
        _, outside = sb.outside_probe('attempt("t", lambda: os.truncate(P["v"], 7)); done()',
                                      {"v": victim})
        assert outside == {"t": "ok"}, outside
    finally:
        os.unlink(victim)

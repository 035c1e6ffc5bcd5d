"""The approval engine on real runs (issue 25 items 1 and 2): `approvals: unix_sockets: ask`.

A connect to a pathname unix socket outside the grants is put to the approver
(the supervisor's terminal, a scripted --approver-socket decider) instead of
being refused: `y`/once lets that one connect through and is not remembered,
run is remembered, `n`/deny fails the connect with EACCES and a `confine:`
line, and the run goes on. Each refusal has its control: the same listener
reached unconfined, or reached inside once approved.
"""
from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
import time

import pytest
from conftest import CONFINE, PY, pty_run

sys.path.insert(0, os.path.dirname(__file__))
from deciders import Decider  # noqa: E402
from test_unix_sockets import Listener  # noqa: E402

ASK_PROFILE = "extends: default\napprovals:\n  unix_sockets: ask\n"

CONNECTS = """
import socket, json, sys
res = []
for p in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p); res.append("C")
    except OSError as e:
        res.append(e.errno)
    finally:
        s.close()
print(json.dumps(res))
"""


@pytest.fixture
def two_listeners():
    a, b = Listener(), Listener()
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def ask_profile():
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", dir="/tmp", delete=False)
    f.write(ASK_PROFILE)
    f.close()
    os.chmod(f.name, 0o644)
    yield f.name
    os.unlink(f.name)


def _connects(sandbox, paths, *opts):
    p = sandbox.run([PY, "-c", CONNECTS, json.dumps(paths)], *opts)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[")]
    return p, (json.loads(lines[-1]) if lines else None)


def test_socket_approver_once_run_deny(sandbox, two_listeners, ask_profile):
    a, b = two_listeners
    ctl = sandbox.outside([PY, "-c", CONNECTS, json.dumps([b.path])])
    assert json.loads(ctl.stdout.splitlines()[-1]) == ["C"], ctl.stderr   # control: reachable unconfined
    time.sleep(0.3)
    b_before = b.hits
    d = Decider(["once", "run", "deny"])
    try:
        p, res = _connects(sandbox, [a.path, a.path, a.path, b.path, b.path],
                           "-p", ask_profile, "--approver-socket", d.path)
    finally:
        d.close()
    assert p.returncode == 0, p.stderr
    # once: through, not remembered (asked again); run: through and remembered
    # (the third connect is not asked); deny: EACCES, remembered, the run goes on
    assert res == ["C", "C", "C", errno.EACCES, errno.EACCES], (res, p.stderr)
    assert [q["subject"]["path"] for q in d.questions] == [a.path, a.path, b.path]
    q = d.questions[0]
    assert q["kind"] == "unix_socket" and q["type"] == "question" and q["version"] == 1
    assert q["workdir"] == sandbox.workdir and q["run"] and q["process"]["pid"] > 0
    assert "once" in q["choices"] and "deny" in q["choices"]
    assert f"confine: denied: connect to unix socket {b.path}" in p.stderr
    assert "scripted deny" in p.stderr           # the reason reaches the agent's terminal
    time.sleep(0.3)
    assert a.hits == 3 and b.hits == b_before


def test_default_still_refuses_without_approvals(root_sandbox, two_listeners):
    """The engine changes nothing for a profile that asks nothing: refused, nobody asked."""
    a, _ = two_listeners
    d = Decider(["run"])
    try:
        p, res = _connects(root_sandbox, [a.path])
    finally:
        d.close()
    assert p.returncode == 0, p.stderr
    assert res == [errno.EACCES] and d.questions == []


def test_non_interactive_denies(user_sandbox, two_listeners, ask_profile):
    """No terminal, no approver: every ask is denied, said, and the run goes on."""
    a, _ = two_listeners
    sb = user_sandbox
    sb.wrap = ["setsid", "-w"]           # no controlling terminal: nobody to ask
    p, res = _connects(sb, [a.path, a.path], "-p", ask_profile)
    assert p.returncode == 0, p.stderr
    assert res == [errno.EACCES, errno.EACCES], (res, p.stderr)
    assert "non-interactive" in p.stderr
    # control: the same run with a decider that allows reaches it
    d = Decider(["once"])
    try:
        p2, res2 = _connects(sb, [a.path], "-p", ask_profile, "--approver-socket", d.path)
    finally:
        d.close()
    assert res2 == ["C"], p2.stderr


def test_dead_decider_denies(root_sandbox, two_listeners, ask_profile):
    a, _ = two_listeners
    d = Decider(raw=b"\xff\xff\xff\xffjunk")    # a frame longer than the cap: malformed
    gone = d.path + ".absent"
    try:
        p, res = _connects(root_sandbox, [a.path], "-p", ask_profile, "--approver-socket", d.path)
        p2, res2 = _connects(root_sandbox, [a.path], "-p", ask_profile, "--approver-socket", gone)
    finally:
        d.close()
    assert res == [errno.EACCES] and len(d.questions) == 1, p.stderr
    assert "frame length" in p.stderr
    assert res2 == [errno.EACCES] and gone in p2.stderr, p2.stderr
    time.sleep(0.3)
    assert a.hits == 0


@pytest.mark.parametrize("mode", ["root", "user"])
def test_terminal_n_refuses_y_allows(mode, confine_bin, test_user, two_listeners, ask_profile):
    """The acceptance: the agent's connect asks on the terminal; `n` fails it with
    EACCES and the run goes on, `y` lets the next one through."""
    from conftest import Sandbox, make_workdir
    if os.geteuid() != 0:
        pytest.skip("needs root")
    a, b = two_listeners
    wd = make_workdir(test_user)
    sb = Sandbox(mode, test_user, wd)
    argv = sb.exec_cmd([PY, "-c", CONNECTS, json.dumps([a.path, b.path])], "-p", ask_profile)
    status, out = pty_run(argv, [(b"[d]eny? ", b"n"), (b"[d]eny? ", b"y")], timeout=30, cwd=wd)
    text = out.decode("utf-8", "replace")
    assert status == 0, text
    assert f"[{errno.EACCES}, \"C\"]" in text, text
    assert "wants connect to unix socket" in text
    time.sleep(0.3)
    assert a.hits == 0 and b.hits == 1
    import shutil
    shutil.rmtree(wd, ignore_errors=True)


def test_bad_example_is_a_load_error(root_sandbox):
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", dir="/tmp", delete=False)
    f.write("extends: default\napprovals:\n  unix_sockets:\n    rules:\n"
            "      - match: /run/*.sock\n        decision: allow\n"
            "        examples: {match: [/run/docker.sock], no_match: [/run/podman.sock]}\n")
    f.close()
    os.chmod(f.name, 0o644)
    try:
        p = root_sandbox.run(["/bin/true"], "-p", f.name)
    finally:
        os.unlink(f.name)
    assert p.returncode == 125
    assert f"{f.name}:7: approvals.unix_sockets.rules[0].examples.no_match: '/run/podman.sock' " \
           "matches '/run/*.sock'" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_approver_socket_flag_needs_something_to_ask(root_sandbox):
    p = root_sandbox.run(["/bin/true"], "--approver-socket", "/tmp/nowhere.sock")
    assert p.returncode == 125 and "--approver-socket only applies" in p.stderr, p.stderr
    assert CONFINE


WRITES = r"""
import json, os
def w(name, mode="w"):
    try:
        with open(name, mode) as f:
            f.write("export FROM_AGENT=1\n")
        return "W"
    except OSError as e:
        return e.errno
def rm(name):
    try:
        os.unlink(name)
        return "U"
    except OSError as e:
        return e.errno
print(json.dumps([w(".envrc"), w(".mcp.json"), w(".bashrc"), rm(".bashrc"), w(".bashrc"),
                  rm(".envrc"), w(".envrc"), w(".envrc"), w("notes.txt")]))
"""


@pytest.fixture
def write_profile():
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", dir="/tmp", delete=False)
    f.write("extends: default\napprovals:\n  protected_writes: ask\n")
    f.close()
    os.chmod(f.name, 0o644)
    yield f.name
    os.unlink(f.name)


def test_protected_write_asked(sandbox, write_profile):
    """A new file at a protected name asks: once lets that create land in place and
    is not remembered, run is, deny fails it with EACCES; the exit check keeps
    exactly the approved file and nothing unapproved is there."""
    d = Decider(["once", "deny", "run", "deny"])
    try:
        p = sandbox.run([PY, "-c", WRITES], "-p", write_profile, "--approver-socket", d.path)
    finally:
        d.close()
    res = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("[")][-1])
    E = errno.EACCES
    # .envrc once; .mcp.json deny; .bashrc run, removed and made again unasked;
    # .envrc removed and asked again (once is not remembered): deny, remembered
    assert res == ["W", E, "W", "U", "W", "U", E, E, "W"], (res, p.stderr)
    assert [q["subject"]["path"] for q in d.questions] == [".envrc", ".mcp.json", ".bashrc", ".envrc"]
    assert d.questions[0]["kind"] == "protected_write"
    assert p.returncode == 0, p.stderr            # nothing for the exit check to act on
    assert "approved: create .bashrc" in p.stderr and "scripted deny" in p.stderr
    kept = sorted(os.listdir(sandbox.workdir))
    assert kept == [".bashrc", "notes.txt"], kept
    with open(os.path.join(sandbox.workdir, ".bashrc")) as f:
        assert f.read() == "export FROM_AGENT=1\n"


def test_protected_write_unapproved_still_held(root_sandbox):
    """Control: without approvals the same create is not made in the workdir (held
    outside it, as before), and nobody is asked."""
    d = Decider(["run"])
    try:
        p = root_sandbox.run([PY, "-c", "open('.envrc', 'w').write('x')"])
    finally:
        d.close()
    assert not os.path.exists(os.path.join(root_sandbox.workdir, ".envrc")), p.stderr
    assert d.questions == [] and "held .envrc" in p.stderr, p.stderr


@pytest.mark.parametrize("mode", ["root", "user"])
def test_protected_write_asked_on_the_terminal(mode, confine_bin, test_user, write_profile):
    """The same questions on the supervisor's terminal: o (once), d (deny), r (run),
    and the once-approved name asked again after it was removed: n."""
    from conftest import Sandbox, make_workdir
    if os.geteuid() != 0:
        pytest.skip("needs root")
    wd = make_workdir(test_user)
    try:
        sb = Sandbox(mode, test_user, wd)
        argv = sb.exec_cmd([PY, "-c", WRITES], "-p", write_profile)
        keys = [(b"[d]eny? ", b"o"), (b"[d]eny? ", b"d"), (b"[d]eny? ", b"r"), (b"[d]eny? ", b"n")]
        status, out = pty_run(argv, keys, timeout=30, cwd=wd)
        text = out.decode("utf-8", "replace")
        E = errno.EACCES
        assert status == 0, text
        assert json.dumps(["W", E, "W", "U", "W", "U", E, E, "W"]) in text, text
        assert text.count("wants write ") == 4, text          # .bashrc made again unasked
        assert sorted(os.listdir(wd)) == [".bashrc", "notes.txt"]
    finally:
        import shutil
        shutil.rmtree(wd, ignore_errors=True)


SWAP = r"""
import json, os, socket, sys, threading, time
a, b = sys.argv[1], sys.argv[2]
os.symlink(a, "link.sock")
def swap():
    time.sleep(0.3)                        # while the person is asked
    os.symlink(b, "tmp.sock")
    os.rename("tmp.sock", "link.sock")
t = threading.Thread(target=swap)
t.start()
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("link.sock")
    res = "C"
except OSError as e:
    res = e.errno
t.join()
print(json.dumps([res, os.readlink("link.sock") == b]))
"""


def test_approved_connect_reaches_the_socket_asked_about(sandbox, two_listeners, ask_profile):
    """The question names the socket the broker resolved and holds open; a symlink
    swapped while the person decides does not move the approved connect."""
    a, b = two_listeners
    d = Decider(["once"], delay=0.8)
    try:
        p = sandbox.run([PY, "-c", SWAP, a.path, b.path], "-p", ask_profile,
                        "--approver-socket", d.path)
    finally:
        d.close()
    res = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("[")][-1])
    assert res == ["C", True], (res, p.stderr)
    assert [q["subject"]["path"] for q in d.questions] == [a.path]
    time.sleep(0.3)
    assert a.hits == 1 and b.hits == 0


EXECS = r"""
import json, subprocess
def run(argv):
    try:
        return subprocess.run(argv, capture_output=True).returncode
    except PermissionError:
        return "EACCES"
print(json.dumps([run(["/usr/bin/id", "-u"]), run(["/bin/true"]), run(["/usr/bin/env", "true"]),
                  run(["/usr/bin/env", "true"])]))
"""


def test_exec_guardrail(sandbox):
    """approvals.exec (a guardrail): a program a rule denies fails with EACCES, one a
    rule asks about is put to the approver (once: asked again), others run."""
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", dir="/tmp", delete=False)
    f.write("extends: default\napprovals:\n  exec:\n    rules:\n"
            "      - {match: /usr/bin/id, decision: deny, examples: {match: [/usr/bin/id], no_match: [/usr/bin/idx]}}\n"
            "      - {match: /usr/bin/env, decision: ask}\n")
    f.close()
    os.chmod(f.name, 0o644)
    ctl = sandbox.outside(["/usr/bin/id", "-u"])
    assert ctl.returncode == 0                           # control: it runs unconfined
    d = Decider(["once", "deny"])
    try:
        p = sandbox.run([PY, "-c", EXECS], "-p", f.name, "--approver-socket", d.path)
    finally:
        d.close()
        os.unlink(f.name)
    res = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("[")][-1])
    assert res == ["EACCES", 0, 0, "EACCES"], (res, p.stderr)
    assert [q["subject"]["path"] for q in d.questions] == ["/usr/bin/env", "/usr/bin/env"]
    assert "exec /usr/bin/id: denied by approvals.exec.rules[0]" in p.stderr, p.stderr

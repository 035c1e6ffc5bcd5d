"""Every refusal explains itself (issue 11, item 5): the cases the issue names,
each a real confined run with a control beside it.

* Landlock's own refusals (a clone of a repository outside the workdir, a TCP
  bind): a run started by root reads them from the kernel's audit stream,
  which Landlock writes only while the kernel's audit is on. The `kernel_audit`
  fixture turns it on for the test and restores it after (confine itself never
  does: it is host-wide). An unprivileged run cannot read them: it says so at
  exit when the agent failed.
* The mediator's and the name guard's refusals (a unix socket outside, a
  protected name): one line with the profile key, as root and unprivileged.
* `rm .envrc` on its read-only bind (EBUSY, seen by no layer): named at exit.
* A workdir below a repository root: a warning at start with the fix.
* `--log FILE` has each refusal as a JSON line; `confine explain FILE` says
  what to add to a profile.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile

import pytest
from conftest import PY, Sandbox, landlock_abi

GAP = "not shown: Landlock's own refusals"


def _audit_set(enabled: int) -> None:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)        # NETLINK_AUDIT
    try:
        s.bind((0, 0))
        body = struct.pack("=10I", 1, enabled, 0, 0, 0, 0, 0, 0, 0, 0)   # mask ENABLED
        s.send(struct.pack("=IHHII", 16 + len(body), 1001, 1 | 4, 1, 0) + body)  # AUDIT_SET
        ack = s.recv(8192)
        err = struct.unpack_from("=i", ack, 16)[0]
        if err:
            raise OSError(-err, os.strerror(-err))
    finally:
        s.close()


@pytest.fixture
def kernel_audit():
    from confine.kernel import audit
    if landlock_abi() < 7:
        pytest.skip("Landlock ABI 7 reports its refusals to audit; this kernel's does not")
    old = audit.enabled()
    if old is None:
        pytest.skip("this kernel's audit cannot be asked (no CONFIG_AUDIT?)")
    if old == 0:
        try:
            _audit_set(1)
        except OSError as e:
            pytest.skip(f"cannot turn the kernel's audit on: {e}")
    try:
        yield
    finally:
        if old == 0:
            _audit_set(0)


@pytest.fixture
def upstream(test_user):
    """A bare repository with one commit, outside the workdir, readable by the agent."""
    top = tempfile.mkdtemp(prefix="confine-up-", dir="/tmp")
    os.chmod(top, 0o755)
    up = os.path.join(top, "up.git")
    src = os.path.join(top, "src")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e", "HOME": top}
    subprocess.run(["git", "init", "-q", "-b", "main", src], check=True, env=env)
    with open(os.path.join(src, "README"), "w") as f:
        f.write("hello\n")
    subprocess.run(["git", "-C", src, "add", "README"], check=True, env=env)
    subprocess.run(["git", "-C", src, "commit", "-qm", "one"], check=True, env=env)
    subprocess.run(["git", "clone", "-q", "--bare", src, up], check=True, env=env)
    for d, _, files in os.walk(top):
        os.chown(d, test_user.pw_uid, test_user.pw_gid)
        for f in files:
            os.chown(os.path.join(d, f), test_user.pw_uid, test_user.pw_gid)
    yield up
    shutil.rmtree(top, ignore_errors=True)


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _lines(stderr: str, needle: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("confine: ") and needle in ln]


# ------------------------------------------------------------------ Landlock's own

def test_clone_refused_by_landlock_names_the_path_and_read(root_sandbox, upstream, kernel_audit):
    box = root_sandbox
    ctl = box.outside(["git", "clone", "-q", upstream, "ctl"])
    assert ctl.returncode == 0, ctl.stderr                     # the control: it exists
    shutil.rmtree(os.path.join(box.workdir, "ctl"))
    p = box.run(["git", "clone", upstream, "x"])
    assert p.returncode != 0
    assert "does not exist" in p.stderr                        # git blames the wrong thing
    got = _lines(p.stderr, "[landlock]")
    assert got, p.stderr
    assert any(upstream in ln and f"--read {upstream}" in ln
               and f"filesystem.read: [{upstream}]" in ln for ln in got), got
    assert len([ln for ln in got if upstream in ln]) == 1, got  # one line for the clone
    assert "refused during the run" in p.stderr and GAP not in p.stderr
    # and the grant it names makes it work
    ok = box.run(["git", "clone", "-q", upstream, "y"], "--read", upstream)
    assert ok.returncode == 0, ok.stderr
    assert not _lines(ok.stderr, "[landlock]"), ok.stderr


def test_http_server_bind_names_bind_tcp(root_sandbox, kernel_audit):
    port = _free_port()
    ctl = root_sandbox.outside([PY, "-c", f"import socket; socket.socket().bind(('127.0.0.1', {port}))"])
    assert ctl.returncode == 0, ctl.stderr
    p = root_sandbox.run([PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"], timeout=30)
    assert p.returncode != 0 and "PermissionError" in p.stderr, p.stderr
    assert any(f"bind TCP port {port}" in ln and f"network.bind_tcp: [{port}]" in ln
               for ln in _lines(p.stderr, "[landlock]")), p.stderr


def test_unprivileged_run_says_where_the_gap_is(user_sandbox, upstream):
    # a symlink at a protected name is refused by the name guard (a new file would be held)
    p = user_sandbox.run(["sh", "-c", f"git clone {upstream} x; ln -s x .envrc"])
    assert "does not exist" in p.stderr
    assert not _lines(p.stderr, f"--read {upstream}")
    assert _lines(p.stderr, "protected: ['!.envrc']")
    assert GAP in p.stderr and "started as root" in p.stderr, p.stderr
    # a read refused by Landlock alone (nothing else refused): the failing run is told
    # once where the refusal may be, with the flag that grants a read
    quiet = user_sandbox.run(["git", "clone", upstream, "y"])
    said = [ln for ln in quiet.stderr.splitlines() if ln.startswith("confine:")]
    assert quiet.returncode != 0 and len(said) == 1, quiet.stderr
    assert GAP in said[0] and "--read PATH" in said[0], said
    # a run that succeeded is not told about it, whatever else was refused
    ok = user_sandbox.run(["sh", "-c", f"git clone {upstream} z; ln -s z .envrc; true"])
    assert ok.returncode == 0 and _lines(ok.stderr, "protected: ['!.envrc']"), ok.stderr
    assert GAP not in ok.stderr, ok.stderr


def test_root_run_with_audit_off_says_so(root_sandbox):
    from confine.kernel import audit
    if audit.enabled() != 0:
        pytest.skip("the kernel's audit is on here")
    if landlock_abi() < 7:
        pytest.skip("Landlock ABI below 7")
    p = root_sandbox.run(["sh", "-c", "cat /root/nothing-here; ln -s x .envrc"])
    assert p.returncode != 0
    assert GAP in p.stderr and "auditctl -e 1" in p.stderr, p.stderr


# ------------------------------------------------------------------ confine's own layers

def test_unix_socket_refusal_names_unix_sockets_allow(sandbox):
    d = tempfile.mkdtemp(prefix="confine-sock-", dir="/tmp")
    os.chmod(d, 0o755)
    path = os.path.join(d, "app.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    os.chmod(path, 0o777)
    srv.listen(8)
    try:
        code = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                f"try: s.connect({path!r}); print('CONNECTED')\n"
                "except OSError as e: print(e.errno)")
        ctl = sandbox.outside([PY, "-c", code])
        assert "CONNECTED" in ctl.stdout, ctl.stderr          # the control
        srv.accept()[0].close()
        p = sandbox.run([PY, "-c", code])
        assert "CONNECTED" not in p.stdout
        got = _lines(p.stderr, "connect to unix socket")
        assert len(got) == 1 and f"unix_sockets.allow: [{path}]" in got[0], p.stderr
        assert "[mediation]" in got[0]
    finally:
        srv.close()
        shutil.rmtree(d, ignore_errors=True)


def test_protected_write_names_the_pattern_and_the_log_explains(sandbox, tmp_path_factory):
    logdir = tempfile.mkdtemp(prefix="confine-log-", dir="/tmp")
    os.chown(logdir, sandbox.pw.pw_uid, sandbox.pw.pw_gid)
    log = os.path.join(logdir, "run.log")
    try:
        # symlinks at protected names: refused by the name guard (new files are held)
        p = sandbox.run(["sh", "-c", "echo a > envrc; ln -s b .envrc; ln -s c .envrc; "
                                     "echo d > sub.mcp.json; ln -s e .mcp.json"],
                        "--log", log)
        assert os.path.exists(os.path.join(sandbox.workdir, "envrc"))    # the control
        assert not os.path.exists(os.path.join(sandbox.workdir, ".envrc"))
        got = _lines(p.stderr, "protected path (.envrc)")
        assert len(got) == 1, p.stderr                          # twice refused, said once
        assert "[name guard]" in got[0] and "protected: ['!.envrc']" in got[0]
        assert _lines(p.stderr, "protected: ['!.mcp.json']")
        assert "3 refused during the run" in p.stderr and log in p.stderr
        with open(log) as f:
            recs = [json.loads(x) for x in f]
        refusals = [r for r in recs if r.get("event") == "refusal"]
        assert len(refusals) == 3 and all(r["layer"] == "name guard" for r in refusals)
        assert refusals[0]["grant"]["value"] == "!.envrc"
        ex = sandbox.confine("explain", log)
        assert ex.returncode == 0, ex.stderr
        assert "protected:\n  - '!.envrc'\n  - '!.mcp.json'" in ex.stdout, ex.stdout
        exj = sandbox.confine("explain", "--json", log)
        assert json.loads(exj.stdout)["grants"] == {"protected": ["!.envrc", "!.mcp.json"]}
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def test_names_with_terminal_escapes_and_long_paths_are_shown_safely(sandbox):
    body = r"""
odd = "e\x1b]0;pwned\x07\x1b[2J"
os.mkdir(odd)
attempt("odd", lambda: os.symlink("x", odd + "/.envrc"))
deep = "/".join(["d" * 200] * 15)
os.makedirs(deep)
attempt("deep", lambda: os.symlink("x", deep + "/.envrc"))
attempt("control", lambda: opened(odd + "/envrc", os.O_WRONLY | os.O_CREAT))
"""
    p, r = sandbox.probe(body)
    assert r == {"odd": "EACCES", "deep": "EACCES", "control": "ok"}, (r, p.stderr)
    assert "\x1b" not in p.stderr and "\x07" not in p.stderr, repr(p.stderr)
    assert _lines(p.stderr, "\\x1b]0;pwned"), p.stderr
    assert len(_lines(p.stderr, "denied: ")) == 2, p.stderr


def test_a_byte_that_is_not_utf8_is_shown_one_way_in_every_line(sandbox):
    # the name guard's line (through the broker), the exit's held list, a CLI error:
    # each shows the byte 0xfe as \xfe (not '?', not \udcfe)
    code = ("import os\nos.mkdir(b'e\\xfe')\n"
            "for p in (b'e\\xfe/.git', b'e\\xfe/.envrc'):\n"
            " try: os.symlink(b'x', p) if p.endswith(b'.git') else open(p, 'w').close()\n"
            " except OSError as e: print(p, e.errno)\n")
    p = sandbox.run([PY, "-c", code])
    assert "b'e\\xfe/.git' 13" in p.stdout, (p.stdout, p.stderr)     # refused, as before
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("confine:") and "e\\xfe" in ln]
    assert any(".git" in ln and "denied" in ln for ln in said), p.stderr
    assert "e?/" not in p.stderr and "udcfe" not in p.stderr, p.stderr
    bad = sandbox.confine("exec", "-w", os.fsdecode(b"/tmp/confine-nx\xfe"), "--", "true")
    assert bad.returncode == 125 and "confine-nx\\xfe" in bad.stderr, bad.stderr
    assert "udcfe" not in bad.stderr, bad.stderr


def test_log_where_the_agent_writes_is_refused(sandbox):
    """The agent could forge what `confine explain` reads: exit 125, one line."""
    for where in (os.path.join(sandbox.workdir, "run.log"),
                  os.path.join(sandbox.workdir, "sub", "..", "run2.log")):
        p = sandbox.run(["true"], "--log", where)
        assert p.returncode == 125, p.stderr
        assert "the agent can write" in p.stderr and len(p.stderr.strip().splitlines()) == 1
        assert not os.path.exists(where)
    ok = sandbox.run(["true"], "--log", f"/tmp/confine-ok-{os.getpid()}.log")   # the control
    try:
        assert ok.returncode == 0, ok.stderr
    finally:
        if os.path.exists(f"/tmp/confine-ok-{os.getpid()}.log"):
            os.unlink(f"/tmp/confine-ok-{os.getpid()}.log")


def test_a_command_not_found_is_the_only_line(sandbox):
    """A command that never ran gets its own error and nothing about the run it
    did not have (the read-only binds, Landlock's unseen refusals)."""
    with open(os.path.join(sandbox.workdir, ".envrc"), "w") as f:
        f.write("x\n")
    os.chown(os.path.join(sandbox.workdir, ".envrc"), sandbox.pw.pw_uid, sandbox.pw.pw_gid)
    p = sandbox.run(["confine-no-such-command"])
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("confine:")]
    assert p.returncode == 127 and len(said) == 1, p.stderr
    assert "confine-no-such-command: command not found" in said[0], said
    # the control: a command that ran and failed still hears about the binds
    failed = sandbox.run(["sh", "-c", "exit 3"])
    if "NOT read-only for this run" in failed.stderr:
        pytest.skip("no mount namespace here: nothing is bound read-only")
    assert failed.returncode == 3 and _lines(failed.stderr, "bound read-only"), failed.stderr


def test_rm_envrc_on_its_read_only_bind_is_named(sandbox):
    envrc = os.path.join(sandbox.workdir, ".envrc")
    for name in (".envrc", "other"):
        with open(os.path.join(sandbox.workdir, name), "w") as f:
            f.write("x\n")
        os.chown(os.path.join(sandbox.workdir, name), sandbox.pw.pw_uid, sandbox.pw.pw_gid)
    ok = sandbox.run(["rm", "other"])
    assert ok.returncode == 0, ok.stderr                       # the control
    assert "bound read-only" not in ok.stderr                  # said only when the agent failed
    p = sandbox.run(["rm", ".envrc"])
    if "NOT read-only for this run" in p.stderr:
        pytest.skip("no mount namespace here: nothing is bound read-only")
    assert p.returncode != 0 and "Device or resource busy" in p.stderr, p.stderr
    assert os.path.exists(envrc)
    got = _lines(p.stderr, "bound read-only")
    assert len(got) == 1 and ".envrc" in got[0] and "[read-only bind]" in got[0], p.stderr
    assert "protected: ['!.envrc']" in got[0]
    # mv is a mediated rename: said at the call, with the pattern
    mv = sandbox.run(["mv", ".envrc", "moved"])
    assert mv.returncode != 0 and "Device or resource busy" in mv.stderr, mv.stderr
    assert os.path.exists(envrc) and not os.path.exists(os.path.join(sandbox.workdir, "moved"))
    got = _lines(mv.stderr, f"denied: rename {envrc}: a protected path, bound read-only")
    assert len(got) == 1 and "protected: ['!.envrc'] grants it" in got[0], mv.stderr


def test_workdir_below_a_repository_root_is_warned(sandbox):
    top = sandbox.workdir
    os.makedirs(os.path.join(top, "sub"))
    ctl = sandbox.outside(["git", "init", "-q", top])
    assert ctl.returncode == 0, ctl.stderr
    sub = os.path.join(top, "sub")
    os.chown(sub, sandbox.pw.pw_uid, sandbox.pw.pw_gid)
    box = Sandbox(sandbox.mode, sandbox.pw, sub, opts=sandbox.opts)
    p = box.run(["git", "rev-parse", "--show-toplevel"], cwd=sub)
    assert p.returncode != 0 and "not a git repository" in p.stderr, p.stderr
    got = _lines(p.stderr, "inside the git repository")
    assert len(got) == 1 and f"-w {top}" in got[0] and f"--read {top}/.git" in got[0], p.stderr
    # the fix it names works, and then nothing is said
    ok = box.run(["git", "rev-parse", "--show-toplevel"], "--read", f"{top}/.git", cwd=sub)
    assert ok.returncode == 0 and ok.stdout.strip() == top, ok.stderr
    assert not _lines(ok.stderr, "inside the git repository")
    # the control: at the root itself nothing is said
    root = sandbox.run(["git", "rev-parse", "--show-toplevel"])
    assert root.returncode == 0 and not _lines(root.stderr, "inside the git repository")


# ------------------------------------------------------------------ seen by the broker

@pytest.fixture
def outside_dirs(test_user):
    """A directory the agent owns outside the workdir (only the sandbox stops a
    write there) and one owned by root (its permissions stop it anyway)."""
    mine = tempfile.mkdtemp(prefix="confine-out-", dir="/tmp")
    os.chown(mine, test_user.pw_uid, test_user.pw_gid)
    roots = tempfile.mkdtemp(prefix="confine-root-", dir="/tmp")
    os.chmod(roots, 0o755)
    yield mine, roots
    shutil.rmtree(mine, ignore_errors=True)
    shutil.rmtree(roots, ignore_errors=True)


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_writes_outside_are_explained_in_every_run(sandbox, outside_dirs, layers):
    """Started by root or not, audit on or off: the broker performs the write for the
    agent and sees the refusal (EROFS from the read-only host, EACCES from Landlock)."""
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    mine, roots = outside_dirs
    ctl = box.outside(["touch", f"{mine}/ctl"])
    assert ctl.returncode == 0, ctl.stderr                     # the control
    p = box.run(["sh", "-c", f"touch {mine}/a; touch {mine}/b; touch {roots}/c; touch ok"])
    assert not os.path.exists(f"{mine}/a") and os.path.exists(os.path.join(box.workdir, "ok"))
    got = _lines(p.stderr, f"--write {mine} or filesystem.write: [{mine}]")
    assert len(got) == 1, p.stderr                              # a and b: one directory
    want = "[read-only host]" if layers == "all" else "[landlock]"
    assert want in got[0], got
    # the root-owned directory: its permissions refuse, no grant would help: not suggested
    assert not _lines(p.stderr, f"--write {roots}"), p.stderr


def test_tcp_connect_is_explained_in_every_run(sandbox):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    code = ("import socket\ns=socket.socket()\n"
            f"try: s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
            "except OSError as e: print(e.errno)")
    try:
        ctl = sandbox.outside([PY, "-c", code])
        assert "CONNECTED" in ctl.stdout, ctl.stderr            # the control
        p = sandbox.run([PY, "-c", code])
        assert "CONNECTED" not in p.stdout and "13" in p.stdout, (p.stdout, p.stderr)
        got = _lines(p.stderr, f"network.connect_tcp: [{port}]")
        assert len(got) == 1 and "[landlock]" in got[0], p.stderr
        # the agent's loopback is its own: the host's service is reached by name
        assert f"--allow-host localhost:{port}" in got[0] and "any host" not in got[0], got
    finally:
        srv.close()


def test_dns_lookup_without_network_names_allow_host(sandbox):
    # the default profile has no network (nothing leaves: no route, no UDP socket)
    p = sandbox.run(["curl", "-sS", "--max-time", "10", "https://example.com/"])
    assert p.returncode == 6 and "resolve" in p.stderr, (p.returncode, p.stderr)
    got = _lines(p.stderr, "--allow-host HOST")
    assert len(got) == 1 and "DNS" in got[0] and "[seccomp]" in got[0], p.stderr
    # said before the agent's own message, and once however many lookups were refused
    err = p.stderr.splitlines()
    assert err.index(got[0]) < next(i for i, ln in enumerate(err) if ln.startswith("curl:")), \
        p.stderr
    # the refusal itself is unchanged: a UDP socket is still refused (EPERM) inside...
    code = ("import socket\ntry:\n socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            "print('MADE')\nexcept OSError as e: print('ERR', e.errno)")
    inside = sandbox.run([PY, "-c", code])
    assert "ERR 1" in inside.stdout, (inside.stdout, inside.stderr)
    assert len(_lines(inside.stderr, "--allow-host HOST")) == 1, inside.stderr
    # ... and made outside (the control); a run without a lookup says nothing of DNS
    assert "MADE" in sandbox.outside([PY, "-c", code]).stdout
    quiet = sandbox.run([PY, "-c", "import socket; print(socket.gethostbyname('localhost'))"])
    assert "127.0.0.1" in quiet.stdout and "confine:" not in quiet.stderr, quiet.stderr

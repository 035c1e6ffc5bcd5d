"""confine inside confine (issue 12 item 3): an agent harness wraps a tool in a
stricter run from inside its own, with no flag.

The inner `confine exec` cannot mediate (the outer's filter holds the one seccomp
listener a filter chain may have) and must not let the outer's broker perform its
calls in the OUTER Landlock domain. So it delegates: it sends its request to the
outer supervisor's endpoint ($CONFINE_DELEGATE, runtime/delegate.py), which makes
the nested run in the outer agent's namespaces under both Landlock domains and both
filter sets, with a broker and mediator of its own judging by both policies
(runtime/delegate_server.py). Without the endpoint the inner still refuses.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap

import pytest
from conftest import CONFINE, PY, last_json, probe_code

pytestmark = pytest.mark.e2e

# The inner confine's own program directory: strict does not read /opt.
PREFIX_DIR = os.path.dirname(os.path.dirname(CONFINE))

WRITE_BODY = r'''
attempt("outer workdir", lambda: opened(P["outer"] + "/from-inner", os.O_WRONLY | os.O_CREAT))
attempt("outer tmp", lambda: opened(os.path.dirname(os.environ["TMPDIR"]) + "/from-inner",
                                    os.O_WRONLY | os.O_CREAT))
attempt("inner workdir", lambda: opened("from-inner", os.O_WRONLY | os.O_CREAT))
attempt("inner tmp", lambda: opened(os.environ["TMPDIR"] + "/from-inner",
                                    os.O_WRONLY | os.O_CREAT))
opened("to-move", os.O_WRONLY | os.O_CREAT)
attempt("rename out", lambda: os.rename("to-move", P["outer"] + "/moved-out"))
attempt("mkdir outer", lambda: os.mkdir(P["outer"] + "/dir-from-inner"))
attempt("envrc", lambda: opened(".envrc", os.O_WRONLY | os.O_CREAT))
attempt("chmod outer", lambda: os.chmod(P["outer"] + "/outer-file", 0o777))
attempt("chmod inner", lambda: os.chmod("from-inner", 0o640))
R["tmpdir"] = os.environ["TMPDIR"]
R["delegate"] = os.environ.get("CONFINE_DELEGATE")
'''

# A pathname unix socket: one of its own (in its TMPDIR, which both allow) and the
# outer's delegation endpoint, which strict's unix roots do not include.
UNIX_BODY = r'''
own = os.environ["TMPDIR"] + "/own.sock"
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); srv.bind(own); srv.listen(1)
attempt("own socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(own))
ep = os.path.dirname(os.environ["TMPDIR"]) + "/.confine-delegate"
attempt("outer endpoint", lambda: socket.socket(socket.AF_UNIX,
                                                socket.SOCK_SEQPACKET).connect(ep))
'''


def _inner_dir(sandbox, name: str = "tool") -> str:
    d = os.path.join(sandbox.workdir, name)
    os.mkdir(d)
    os.chown(d, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    return d


def _own(sandbox, path: str) -> None:
    os.chown(path, sandbox.agent.pw_uid, sandbox.agent.pw_gid)


def _inner(inner_wd: str, *opts: str, cmd=("true",), profile: str = "strict") -> list[str]:
    return [CONFINE, "exec", "-w", inner_wd, "-p", profile, *opts, "--", *cmd]


def _sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", textwrap.dedent(script)]


def test_inner_run_cannot_write_where_only_the_outer_grants(sandbox):
    """Acceptance: no flag. The inner (strict, workdir = a subdirectory) cannot
    create, rename or mkdir into the outer's workdir or TMPDIR, nor chmod there,
    nor make a protected name (.envrc) in its own workdir; it can
    create and chmod in its own workdir and TMPDIR (inside the outer's). Control:
    the outer run itself writes the outer's workdir."""
    wd = _inner_dir(sandbox)
    outer_file = os.path.join(sandbox.workdir, "outer-file")
    with open(outer_file, "w"):
        pass
    _own(sandbox, outer_file)
    os.chmod(outer_file, 0o600)
    code = probe_code(WRITE_BODY, {"outer": sandbox.workdir})
    p = sandbox.run(_inner(wd, cmd=(PY, "-c", code)))
    r = last_json(p.stdout)
    assert r is not None, (p.returncode, p.stderr)
    tmp = r.pop("tmpdir")
    assert os.path.basename(os.path.dirname(tmp)).startswith("confine-"), tmp
    assert r.pop("delegate") == "-", "a nested run offers no endpoint of its own"
    assert r["inner workdir"] == "ok" and r["inner tmp"] == "ok", (r, p.stderr)  # control
    assert r["chmod inner"] == "ok", (r, p.stderr)
    assert r == {"outer workdir": "EACCES", "outer tmp": "EACCES", "inner workdir": "ok",
                 "inner tmp": "ok", "rename out": "EACCES", "mkdir outer": "EACCES",
                 "envrc": "EACCES",
                 "chmod outer": r["chmod outer"], "chmod inner": "ok"}, (r, p.stderr)
    assert r["chmod outer"] in ("EACCES", "EPERM", "EROFS"), r
    for name in ("from-inner", "moved-out", "dir-from-inner"):
        assert not os.path.exists(os.path.join(sandbox.workdir, name)), name
    assert not os.path.exists(os.path.join(wd, ".envrc"))
    assert os.stat(outer_file).st_mode & 0o777 == 0o600
    assert "protected path (.envrc)" in p.stderr, p.stderr
    control = sandbox.py("import os; os.close(os.open('outer-made', os.O_WRONLY | os.O_CREAT));"
                         " print('{\"ok\": 1}')")[1]
    assert control == {"ok": 1}
    assert os.path.exists(os.path.join(sandbox.workdir, "outer-made"))


def test_inner_unix_connect_judged_by_the_inner_policy(sandbox):
    """A unix connect the inner policy does not allow (the outer's own endpoint in
    the outer's TMPDIR, which the outer allows) is refused; its own socket in its
    TMPDIR connects (control)."""
    wd = _inner_dir(sandbox)
    p = sandbox.run(_inner(wd, cmd=(PY, "-c", probe_code(UNIX_BODY))))
    r = last_json(p.stdout)
    assert r == {"own socket": "ok", "outer endpoint": "EACCES"}, (r, p.stderr)


def test_exit_status_and_stdio_come_back(sandbox):
    """The nested command's status is the inner confine's (0, 3, 127 for a command
    not found, with its one line), and its stdin/stdout/stderr are the inner's."""
    wd = _inner_dir(sandbox)
    script = f"""
        echo piped | {CONFINE} exec -w {wd} -p strict -- /bin/sh -c 'read x; echo "got $x"; echo err >&2'
        echo "s0=$?"
        {CONFINE} exec -w {wd} -p strict -- /bin/sh -c 'exit 3'; echo "s3=$?"
        {CONFINE} exec -w {wd} -p strict -- no-such-command-here; echo "s127=$?"
    """
    p = sandbox.run(_sh(script))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    assert lines == ["got", "piped", "s0=0", "s3=3", "s127=127"], (p.stdout, p.stderr)
    assert "err" in p.stderr.splitlines(), p.stderr
    assert "no-such-command-here: command not found" in p.stderr, p.stderr


def test_inner_profile_cannot_widen_the_outer(sandbox):
    """An inner profile (a file the inner reads in its own view) granting writes to
    a directory the outer does not grant, and --write of it: still refused, and
    chmod there too. Control: the agent identity writes there outside any run."""
    wd = _inner_dir(sandbox)
    other = tempfile.mkdtemp(prefix="confine-nested-other-", dir="/var/tmp")
    try:
        _own(sandbox, other)
        target = os.path.join(other, "f")
        with open(target, "w"):
            pass
        _own(sandbox, target)
        prof = os.path.join(wd, "wide.yaml")
        with open(prof, "w") as f:
            f.write(f"extends: strict\nfilesystem:\n  write:\n    - {other}\n")
        _own(sandbox, prof)
        body = r'''
attempt("create", lambda: opened(P["other"] + "/new", os.O_WRONLY | os.O_CREAT))
attempt("write", lambda: opened(P["other"] + "/f", os.O_WRONLY))
attempt("chmod", lambda: os.chmod(P["other"] + "/f", 0o777))
'''
        code = probe_code(body, {"other": other})
        for opts in (("-p", prof), ("--write", other)):
            p = sandbox.run([CONFINE, "exec", "-w", wd, *opts, "--", PY, "-c", code]
                            if opts[0] == "-p" else _inner(wd, *opts, cmd=(PY, "-c", code)))
            r = last_json(p.stdout)
            assert r is not None, (opts, p.returncode, p.stderr)
            # EROFS where the outer has its read-only host view
            assert r["create"] in ("EACCES", "EROFS"), (opts, r, p.stderr)
            assert r["write"] in ("EACCES", "EROFS"), (opts, r, p.stderr)
            assert r["chmod"] in ("EACCES", "EPERM", "EROFS"), (opts, r)
            assert not os.path.exists(os.path.join(other, "new"))
            assert os.stat(target).st_mode & 0o777 != 0o777
        control = sandbox.outside_probe(body, {"other": other})[1]
        assert control == {"create": "ok", "write": "ok", "chmod": "ok"}, control
    finally:
        shutil.rmtree(other, ignore_errors=True)


# Requests written by hand to the endpoint: each is refused with a reason, and a
# proper nested run works afterwards in the same outer run.
BAD_REQUESTS = r'''
import array
ep = os.environ["CONFINE_DELEGATE"]
good = {"v": 1, "argv": ["true"], "cwd": os.getcwd(), "env": {}, "workdir": None,
        "profile": {"ref": "strict", "layers": [{"name": "strict", "path": "x",
                                                 "builtin": True, "text": ""}]},
        "read": [], "write": [], "cli_env": [], "force_workdir": False,
        "agent_status": False, "allow_degraded": False, "dry_run": False}

def ask(name, payload, fds=(), bufsize=None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if bufsize:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, bufsize)
    s.connect(ep)
    try:
        if fds:
            socket.send_fds(s, [payload], list(fds))
        else:
            s.send(payload)
        R[name] = json.loads(s.recv(1 << 20)).get("refused", "NOT REFUSED")[:120]
    except OSError as e:
        R[name] = "send:" + en(e.errno)
    finally:
        s.close()

def with_(**kw):
    d = dict(good); d.update(kw); return json.dumps(d).encode()

ask("not json", b"\x00\xffnot json")
ask("not an object", b"[1, 2, 3]")
ask("huge", b"{" + b" " * (300 * 1024) + b"}", bufsize=4 << 20)
ask("argv type", with_(argv="true"))
ask("argv nul", with_(argv=["tr\x00ue"]))
ask("argv empty", with_(argv=[]))
ask("env type", with_(env={"A": 1}))
ask("cwd relative", with_(cwd="relative/dir"))
ask("cwd root", with_(cwd="/"))
ask("cwd missing", with_(cwd="/nonexistent-confine-dir"))
ask("workdir type", with_(workdir=5))
ask("layers empty", with_(profile={"ref": "strict", "layers": []}))
ask("profile name", with_(profile={"ref": "x", "layers": [{"name": "../x", "path": "x",
                                                          "builtin": False, "text": ""}]}))
ask("profile type", with_(profile="strict"))
ask("bool type", with_(dry_run="yes"))
ask("no fds", with_())
ask("not a pidfd", with_(), fds=(0, 1, 2, 0))
ask("deep json", b"[" * 100000 + b"]" * 100000)
'''


def test_hand_written_requests_are_refused(sandbox):
    """Malformed, huge, wrongly typed requests, argv with a NUL, a cwd outside, a
    request without descriptors or naming another process: refused with a reason,
    and the outer run keeps working (a nested run after them succeeds)."""
    wd = _inner_dir(sandbox)
    script_file = os.path.join(sandbox.workdir, "bad.py")
    with open(script_file, "w") as f:
        f.write(probe_code(BAD_REQUESTS))
    script = f"""
        {PY} {script_file}
        cd {wd} && {CONFINE} exec -p strict -- /bin/sh -c 'echo nested-ok'
    """
    p = sandbox.run(_sh(script), timeout=120)
    r = last_json(p.stdout.split("nested-ok")[0])
    assert r is not None, (p.returncode, p.stdout, p.stderr)
    for name, why in r.items():
        assert why != "NOT REFUSED" and why, (name, r)
    assert "too large" in r["huge"] or r["huge"].startswith("send:"), r
    assert "JSON" in r["not json"], r
    assert "argv" in r["argv type"] and "argv" in r["argv nul"], r
    assert "cwd" in r["cwd relative"], r
    assert "descriptors" in r["no fds"], r
    assert "pidfd" in r["not a pidfd"], r
    assert p.stdout.strip().endswith("nested-ok"), (p.stdout, p.stderr)   # control


def test_sigterm_to_the_inner_ends_the_nested_command(sandbox):
    """SIGTERM to the inner confine reaches the nested command (its status 143
    comes back), which ignores SIGINT but not SIGTERM."""
    wd = _inner_dir(sandbox)
    script = f"""
        {CONFINE} exec -w {wd} -p strict -- /bin/sh -c 'trap "" INT; : > started; exec /bin/sleep 300' &
        P=$!
        n=0; while [ ! -e {wd}/started ] && [ $n -lt 400 ]; do /bin/sleep 0.05; n=$((n+1)); done
        kill -TERM $P; wait $P; echo "status=$?"
    """
    p = sandbox.run(_sh(script), timeout=120)
    assert "status=143" in p.stdout, (p.stdout, p.stderr)


def _procs_with(arg: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if arg.encode() in f.read().split(b"\0"):
                        out.append(int(pid))
            except OSError:
                pass
    return out


def test_the_outer_run_ending_kills_nested_runs(sandbox):
    """The outer agent starts a nested run and exits: nothing of the nested run is
    left. Control: while the outer runs, the nested command does exist."""
    wd = _inner_dir(sandbox)
    mark = "987.25"
    script = f"""
        {CONFINE} exec -w {wd} -p strict -- /bin/sh -c ': > started; exec /bin/sleep {mark}' &
        n=0; while [ ! -e {wd}/started ] && [ $n -lt 400 ]; do /bin/sleep 0.05; n=$((n+1)); done
        for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -cx "/bin/sleep {mark} "
        exit 0
    """
    p = sandbox.run(_sh(script), timeout=120)
    assert p.stdout.strip().splitlines()[-1:] == ["1"], (p.stdout, p.stderr)   # control
    assert _procs_with(mark) == []


def test_nested_twice_is_refused_with_a_reason(sandbox):
    """confine in confine in confine: the third level is refused (125) naming
    the one level of nesting supported; the second level itself ran (control)."""
    wd = _inner_dir(sandbox)
    p = sandbox.run(_inner(wd, "--read", PREFIX_DIR, cmd=(
        "/bin/sh", "-c", f"echo second; {CONFINE} exec -p strict -- true; echo third=$?")))
    assert p.stdout.split() == ["second", "third=125"], (p.stdout, p.stderr)
    assert "only one level of nesting" in p.stderr, p.stderr


def test_dry_run_of_the_inner_says_it_delegates(sandbox):
    """--dry-run inside a run: the nested plan (nothing missing), its mechanism and
    the intersection of what both grant."""
    wd = _inner_dir(sandbox)
    p = sandbox.run(_inner(wd, "--dry-run", "--json"))
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["missing"] == [], d["missing"]
    dg = d["delegation"]
    assert dg["mechanism"] == "delegated to the outer supervisor", dg
    assert wd in dg["writable"] and sandbox.workdir not in dg["writable"], dg
    text = sandbox.run(_inner(wd, "--dry-run"))
    assert "delegated: to the outer supervisor" in text.stdout, text.stdout


def test_inner_run_without_the_endpoint_still_refuses(sandbox):
    """Fail closed: the endpoint variable removed, the inner confine refuses as
    before (125, the outer_mediator reason), never running half-mediated."""
    wd = _inner_dir(sandbox)
    p = sandbox.run(["/usr/bin/env", "-u", "CONFINE_DELEGATE", *_inner(wd)])
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert "cannot enforce" in p.stderr and "internal error" not in p.stderr, p.stderr
    dry = sandbox.run(["/usr/bin/env", "-u", "CONFINE_DELEGATE",
                       *_inner(wd, "--dry-run", "--json")])
    missing = {m["feature"] for m in json.loads(dry.stdout)["missing"]}
    assert "outer_mediator" in missing, missing
    control = sandbox.run(_inner(wd))
    assert control.returncode == 0, control.stderr


def test_inner_run_forced_past_its_refusal_still_refuses_at_landlock(sandbox):
    """Without the endpoint and told to accept what it lacks, the inner still
    cannot apply a Landlock domain the outer's broker would bypass: the outer
    refuses landlock_restrict_self, and the inner stops (125) at its landlock
    step, never running the command half-confined. Control: the outer runs it."""
    wd = _inner_dir(sandbox)
    body = 'attempt("read", lambda: read_file("/etc/hostname"))'
    p = sandbox.run(["/usr/bin/env", "-u", "CONFINE_DELEGATE",
                     *_inner(wd, "--allow-degraded", cmd=(PY, "-c", probe_code(body)))])
    assert p.returncode == 125 and last_json(p.stdout) is None, (p.stdout, p.stderr)
    assert "landlock" in p.stderr, p.stderr
    control = sandbox.run([PY, "-c", probe_code(body)])
    assert last_json(control.stdout) == {"read": "ok"}, control.stderr


@pytest.mark.parametrize("tmpdir, why", [
    ("relative/dir", "not an absolute path"),
    ("/nonexistent-confine-tmp", "No such file"),
    ("/etc/hostname", "not a directory"),
])
def test_unusable_tmpdir_is_refused(sandbox, tmpdir, why):
    """A TMPDIR confine cannot use safely is refused in one line, exit 125;
    control: the same run without it works."""
    p = sandbox.run(["true"], env_extra=[f"TMPDIR={tmpdir}"])
    assert p.returncode == 125, p.stderr
    assert why in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert sandbox.run(["true"]).returncode == 0


def test_tmpdir_writable_by_others_is_refused(sandbox):
    """A TMPDIR another user could rename the run's directory out of (group or
    world writable without the sticky bit, or owned by another user): refused.
    Control: the same directory made sticky is used, and the run's TMPDIR is in it."""
    top = tempfile.mkdtemp(prefix="confine-tmpbase-", dir="/tmp")
    base = os.path.join(top, "shared")
    os.mkdir(base)
    os.chmod(top, 0o755)
    os.chmod(base, 0o777)
    try:
        _sticky_or_not(sandbox, base)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _sticky_or_not(sandbox, base: str) -> None:
    p = sandbox.run(["true"], env_extra=[f"TMPDIR={base}"])
    assert p.returncode == 125 and "not sticky" in p.stderr, p.stderr
    os.chmod(base, 0o1777)
    p = sandbox.run([PY, "-c", "import os; print(os.environ['TMPDIR'])"],
                    env_extra=[f"TMPDIR={base}"])
    assert p.returncode == 0, p.stderr
    assert os.path.dirname(p.stdout.strip()) == base, p.stdout
    assert os.listdir(base) == []                       # removed at exit


# A program that sandboxes itself with Landlock (as Codex's sandbox or landrun do):
# it may create files only beneath sub/.
SELF_LANDLOCK = r"""
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long
RIGHTS = (1 << 1) | (1 << 8)                      # WRITE_FILE | MAKE_REG
fd = libc.syscall(444, struct.pack("QQQ", RIGHTS, 0, 0), 24, 0)
pfd = os.open("sub", os.O_PATH | os.O_DIRECTORY)
assert libc.syscall(445, fd, 1, struct.pack("=Qi", RIGHTS, pfd), 0) == 0
libc.prctl(38, 1, 0, 0, 0)
assert libc.syscall(446, fd, 0) == 0
out = {}
for p in ("sub/ok", "outside-sub"):
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600)); out[p] = "ok"
    except OSError as e:
        out[p] = e.strerror
print(out)
"""


def test_a_program_cannot_add_a_landlock_domain_that_would_not_hold(sandbox):
    """Inside a run, a program's own landlock_restrict_self is refused (EPERM): the
    broker performs its mediated file calls in the run's domain, so its rules would
    not hold for them (seen: it created outside-sub/ beside its only grant). Control:
    outside any run the same program restricts itself and is refused outside sub/."""
    sub = os.path.join(sandbox.workdir, "sub")
    os.mkdir(sub)
    os.chown(sub, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    outside = sandbox.outside([PY, "-c", SELF_LANDLOCK])
    assert "'outside-sub': 'Permission denied'" in outside.stdout, outside.stderr
    p = sandbox.run([PY, "-c", SELF_LANDLOCK])
    assert p.returncode != 0 and "AssertionError" in p.stderr, (p.stdout, p.stderr)
    assert not os.path.exists(os.path.join(sandbox.workdir, "outside-sub"))
    errno_of = sandbox.run([PY, "-c", "import ctypes, os; libc = ctypes.CDLL(None, "
                            "use_errno=True); libc.prctl(38, 1, 0, 0, 0); "
                            "print(libc.syscall(446, -1, 0), os.strerror(ctypes.get_errno()))"])
    assert errno_of.stdout.split(None, 1) == ["-1", "Operation not permitted\n"], errno_of


def test_check_inside_a_run_names_the_delegation(sandbox):
    """`confine check` inside a run says `confine exec` is delegated to the outer
    supervisor, per profile: strict and default are fully enforceable that way;
    a profile with network keys is refused with its reason (not yet delegated)."""
    wd = _inner_dir(sandbox)
    p = sandbox.run([CONFINE, "check", "--json"], cwd=wd)
    profiles = {e["profile"]: e for e in json.loads(p.stdout)["profiles"]}
    for name in ("strict", "default"):
        assert profiles[name]["mechanism"] == "delegated to the outer supervisor", profiles
        assert profiles[name]["enforceable"] is True, profiles[name]
    net = [e for e in profiles.values() if not e["enforceable"]]
    assert all("network" in e.get("refused", "") for e in net), net
    text = sandbox.run([CONFINE, "check"], cwd=wd)
    assert "delegated to the outer supervisor" in text.stdout, text.stdout


def test_a_nested_process_cannot_ask_for_a_wider_run(sandbox):
    """A process of a nested run that reaches the outer's endpoint (its profile
    allows unix sockets in the outer's TMPDIR, and it names the endpoint itself)
    is refused: it could otherwise ask for a run wider than its own. Control: the
    outer's own process asks the same and its nested run works."""
    wd = _inner_dir(sandbox)
    script = f"""
        printf 'extends: strict\\nunix_sockets:\\n  allow:\\n    - %s\\n' "$TMPDIR" > {wd}/reach.yaml
        EP="$CONFINE_DELEGATE"
        {CONFINE} exec -w {wd} -p {wd}/reach.yaml --read {PREFIX_DIR} -- \\
            /usr/bin/env CONFINE_DELEGATE="$EP" {CONFINE} exec -w {wd} -p default -- \\
            /bin/sh -c 'echo WIDER'
        echo "nested-asks=$?"
        {CONFINE} exec -w {wd} -p default -- /bin/sh -c 'echo control-ok'
    """
    p = sandbox.run(_sh(script), timeout=120)
    assert "WIDER" not in p.stdout, (p.stdout, p.stderr)
    assert "nested-asks=125" in p.stdout, (p.stdout, p.stderr)
    assert "only one level of nesting" in p.stderr, p.stderr
    assert "control-ok" in p.stdout, (p.stdout, p.stderr)


def test_sigkill_of_the_inner_ends_the_nested_command(sandbox):
    """The inner confine killed outright (no relay possible): its end of the
    endpoint closes and the outer ends the nested command. Control: it ran."""
    wd = _inner_dir(sandbox)
    mark = "876.5"
    script = f"""
        {CONFINE} exec -w {wd} -p strict -- /bin/sh -c ': > started; exec /bin/sleep {mark}' &
        P=$!
        n=0; while [ ! -e {wd}/started ] && [ $n -lt 400 ]; do /bin/sleep 0.05; n=$((n+1)); done
        count() {{ for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -cx "/bin/sleep {mark} "; }}
        echo "before=$(count)"
        kill -KILL $P
        n=0; while [ "$(count)" != 0 ] && [ $n -lt 400 ]; do /bin/sleep 0.05; n=$((n+1)); done
        echo "after=$(count)"
    """
    p = sandbox.run(_sh(script), timeout=120)
    assert "before=1" in p.stdout, (p.stdout, p.stderr)      # control
    assert "after=0" in p.stdout, (p.stdout, p.stderr)


# Nine connections that send nothing: the ninth is refused (at most eight nested
# runs at once); once they are closed, a nested run works again.
FLOOD = r'''
import time
ep = os.environ["CONFINE_DELEGATE"]
held = []
for _ in range(8):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(ep); held.append(s)
time.sleep(0.5)
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(ep)
s.settimeout(30)
R["ninth"] = json.loads(s.recv(4096)).get("refused", "NOT REFUSED")
for h in held:
    h.close()
'''


def test_too_many_nested_runs_at_once_are_refused(sandbox):
    wd = _inner_dir(sandbox)
    script_file = os.path.join(sandbox.workdir, "flood.py")
    with open(script_file, "w") as f:
        f.write(probe_code(FLOOD))
    script = f"""
        {PY} {script_file}
        n=0; until {CONFINE} exec -w {wd} -p strict -- /bin/sh -c 'echo after-ok' 2>/dev/null
        do n=$((n+1)); [ $n -lt 50 ] || break; /bin/sleep 0.1; done
    """
    p = sandbox.run(_sh(script), timeout=120)
    r = last_json(p.stdout)
    assert r is not None and "too many nested runs" in r["ninth"], (p.stdout, p.stderr)
    assert p.stdout.strip().endswith("after-ok"), (p.stdout, p.stderr)


def test_nested_run_where_the_outer_has_no_namespaces(sandbox):
    """The outer without mount and pid namespaces (Landlock, seccomp and the
    broker's replacements): the nested run joins no namespace and still cannot
    create, rename or chmod where only the outer grants (chmod judged by both
    writable sets), nor make .envrc; its own writes work (control)."""
    sb = sandbox.without_namespaces()
    wd = _inner_dir(sb)
    outer_file = os.path.join(sb.workdir, "outer-file")
    with open(outer_file, "w"):
        pass
    _own(sb, outer_file)
    os.chmod(outer_file, 0o600)
    p = sb.run(_inner(wd, cmd=(PY, "-c", probe_code(WRITE_BODY, {"outer": sb.workdir}))))
    r = last_json(p.stdout)
    assert r is not None, (p.returncode, p.stderr)
    assert r["inner workdir"] == "ok" and r["chmod inner"] == "ok", (r, p.stderr)   # control
    for k in ("outer workdir", "outer tmp", "rename out", "mkdir outer", "envrc"):
        assert r[k] == "EACCES", (k, r, p.stderr)
    assert r["chmod outer"] in ("EACCES", "EPERM", "EROFS"), r
    assert os.stat(outer_file).st_mode & 0o777 == 0o600
    assert not os.path.exists(os.path.join(sb.workdir, "from-inner"))


def test_sigterm_at_the_worst_moment_leaves_nothing(sandbox):
    """SIGTERM to the inner confine at once, before or while the outer makes the
    nested run, five times: each inner ends, and no nested command is left."""
    wd = _inner_dir(sandbox)
    mark = "765.5"
    script = f"""
        for i in 1 2 3 4 5; do
            {CONFINE} exec -w {wd} -p strict -- /bin/sleep {mark} &
            kill -TERM $!; wait $!; echo "status=$?"
        done
        count() {{ for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -cx "/bin/sleep {mark} "; }}
        n=0; while [ "$(count)" != 0 ] && [ $n -lt 400 ]; do /bin/sleep 0.05; n=$((n+1)); done
        echo "left=$(count)"
    """
    p = sandbox.run(_sh(script), timeout=120)
    assert p.stdout.count("status=") == 5, (p.stdout, p.stderr)
    assert "left=0" in p.stdout, (p.stdout, p.stderr)
    assert _procs_with(mark) == []


def test_nested_command_gets_default_signal_dispositions(sandbox):
    """No signal ignored or blocked in the nested command (the outer's server
    ignores the terminal's): SigIgn and SigBlk of its /proc status are empty,
    as in the outer run (control)."""
    wd = _inner_dir(sandbox)
    code = ("import json; d = dict(l.split(':', 1) for l in open('/proc/self/status'));"
            " print(json.dumps({k: d[k].strip() for k in ('SigIgn', 'SigBlk')}))")
    outer = last_json(sandbox.run([PY, "-c", code]).stdout)
    p = sandbox.run(_inner(wd, cmd=(PY, "-c", code)))
    inner = last_json(p.stdout)
    assert outer is not None and outer["SigBlk"] == "0" * 16, outer
    assert inner == outer, (inner, p.stderr)


def test_nested_run_below_landlock_abi_6_is_refused_by_name(sandbox):
    """Below Landlock ABI 6 the outer replaces signal and abstract-socket scoping by
    its own pid and network namespaces, which a nested run shares with the outer
    agent: the nested run is refused (125) naming the scoping, never run without
    it. Control: the outer run itself runs there."""
    import copy
    sb = copy.copy(sandbox)
    sb.env = sandbox.env + ["CONFINE_TEST_LANDLOCK_ABI_MAX=5"]
    wd = _inner_dir(sb)
    p = sb.run(_sh(f"echo outer-ran; {CONFINE} exec -w {wd} -p strict -- echo NESTED; "
                   "echo rc=$?"))
    assert "outer-ran" in p.stdout and "NESTED" not in p.stdout, (p.stdout, p.stderr)
    assert "rc=125" in p.stdout, (p.stdout, p.stderr)
    assert "cannot enforce landlock.scope_" in p.stderr, p.stderr


def test_a_bad_inner_profile_is_one_line_with_its_own_name(sandbox):
    """An inner profile the outer supervisor refuses (a write grant that does not
    exist) is one line, exit 125, naming the file as the inner wrote it (not
    the outer's private copy). Control: the same profile without it runs."""
    wd = _inner_dir(sandbox)
    bad, good = os.path.join(wd, "bad.yaml"), os.path.join(wd, "good.yaml")
    with open(bad, "w") as f:
        f.write("extends: strict\nfilesystem:\n  write:\n    - /nonexistent-confine-dir\n")
    with open(good, "w") as f:
        f.write("extends: strict\n")
    p = sandbox.run([CONFINE, "exec", "-w", wd, "-p", bad, "--", "true"])
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and f"{bad}:4:" in p.stderr, p.stderr
    assert "confine-nested-profile" not in p.stderr, p.stderr
    assert sandbox.run([CONFINE, "exec", "-w", wd, "-p", good, "--", "true"]).returncode == 0


def _links(pid: int) -> dict[int, str]:
    out = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            pass
    return out


def test_the_endpoint_server_holds_none_of_the_runs_pipes_and_sockets(sandbox):
    """The server is forked beside the child's first steps, after the supervisor
    opened the child's pipes and sockets (status, broker, sync, the audit socket):
    it must keep none of them (each end must close when the supervisor closes it),
    only its endpoint and what was open when the endpoint was bound."""
    import subprocess
    import time
    p = sandbox.popen(_sh("echo $CONFINE_DELEGATE; exec sleep 30"), stdout=subprocess.PIPE,
                      text=True)
    try:
        ep = p.stdout.readline().strip()
        assert ep, "no endpoint offered"
        with open("/proc/net/unix") as f:
            inodes = {ln.split()[6] for ln in f if ln.split()[-1] == ep}
        assert len(inodes) == 1, inodes
        sock = f"socket:[{inodes.pop()}]"
        server = None
        deadline = time.monotonic() + 10
        while server is None and time.monotonic() < deadline:
            for pid in (int(n) for n in os.listdir("/proc") if n.isdigit()):
                try:
                    if sock in _links(pid).values():
                        server = pid
                except OSError:
                    continue
        assert server is not None, "no process holds the endpoint"
        with open(f"/proc/{server}/stat") as f:
            supervisor = int(f.read().rsplit(")", 1)[1].split()[1])
        kinds = ("socket:", "pipe:")
        mine = {v for k, v in _links(server).items() if k > 2 and v.startswith(kinds)}
        theirs = {v for k, v in _links(supervisor).items() if k > 2 and v.startswith(kinds)}
        assert sock in mine and sock not in theirs
        assert not mine & theirs, (mine, theirs)
    finally:
        p.terminate()           # forwarded to the agent: the run ends as it would
        p.wait(timeout=30)


def test_nested_dry_run_is_no_oracle_for_what_the_agent_cannot_read(sandbox):
    """Issue 21 item 5: the outer supervisor (root, outside, when the outer was
    started as root) judged a nested request by walking its workdir itself, so a
    --dry-run named what lies in a directory the agent gets "Permission denied"
    on. A directory it cannot open (that exists, with .envrc and a hook), one
    that does not exist and a symlink in the workdir leading to the first get
    the same refusal naming the rule and nothing in it, with or without
    --force-workdir (refused from a request); the same for --read. Control: a
    nested dry-run in a subdirectory of the workdir works, and names its .envrc."""
    secret = tempfile.mkdtemp(prefix="confine-secret-", dir="/root")
    missing = secret + "-nonexistent"
    try:
        os.makedirs(os.path.join(secret, ".git", "hooks"))
        for rel in (".envrc", ".git/hooks/pre-commit", "hidden-name.txt"):
            with open(os.path.join(secret, rel), "w") as f:
                f.write("x\n")
        os.chmod(secret, 0o700)
        link = os.path.join(sandbox.workdir, "way-out")
        os.symlink(secret, link)
        wd = _inner_dir(sandbox)
        os.mkdir(os.path.join(wd, ".vscode"))       # another name than the secret's
        with open(os.path.join(wd, ".vscode", "tasks.json"), "w") as f:
            f.write("{}\n")
        # control: the agent itself cannot look into it
        assert sandbox.outside(["ls", secret]).returncode != 0

        asks = [(path, opts) for opts in ((), ("--force-workdir",))
                for path in (secret, missing, link)]
        asks += [(wd, ("--read", os.path.join(path, ".envrc"))) for path in (secret, missing)]
        asks += [(wd, ())]      # control
        # one outer run for all: its TMPDIR, named in the refusals, is the same
        script = "".join(f"{' '.join(_inner(path, '--dry-run', '--json', *opts))} "
                         f"> {wd}/out.{i} 2>&1; echo \"status=$?\" >> {wd}/out.{i}\n"
                         for i, (path, opts) in enumerate(asks))
        p = sandbox.run(_sh(script), timeout=120)
        assert p.returncode == 0, p.stderr
        outs = []
        for i, (path, opts) in enumerate(asks):
            with open(os.path.join(wd, f"out.{i}")) as f:
                outs.append(f.read())
        control = outs.pop()
        assert control.endswith("status=0\n"), control
        assert ".vscode" in control and f'"{wd}"' in control, control
        same = []
        for (path, opts), out in zip(asks, outs):
            asked = opts[-1] if opts[:1] == ("--read",) else path
            out = out.replace(asked, "PATH")
            for word in (".envrc", "hooks", "hidden-name", "pre-commit"):
                assert word not in out, (path, opts, out)
            same.append(out)
        for group, rule in ((same[0:3], "must be a directory the agent can open, inside "
                             "the outer run's writable paths"),
                            (same[3:6], "--force-workdir is not accepted"),
                            (same[6:8], "does not exist (from --read/--write)")):
            assert len(set(group)) == 1, group
            assert rule in group[0] and group[0].endswith("status=125\n"), group[0]
            assert group[0].count("\n") == 2, group[0]        # one line, and the status
    finally:
        shutil.rmtree(secret, ignore_errors=True)

"""confine inside confine (issue 12 item 3): an agent harness wraps a tool in a
stricter run from inside its own.

The inner `confine exec` is a host without user namespaces (the outer's seccomp
refuses unshare) whose /tmp is read-only (its TMPDIR is the outer's private one),
and whose seccomp listener is taken: the kernel allows one listener per filter
chain and the outer supervisor holds it (EBUSY). Worse, the outer's broker
performs the file calls it mediates (opens for writing, creates, renames) for
every process of its run, in the OUTER Landlock domain: the inner's Landlock
rules do not hold for them. The inner must say exactly that and refuse
(`outer_mediator`), and a run told to accept it shows the hole (a strict xfail
until the outer performs nested processes' calls in their own domain). The
outer therefore refuses landlock_restrict_self to every program of its run.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest
from conftest import CONFINE, PY, last_json, probe_code

pytestmark = pytest.mark.e2e

# What nons' replacements take over (the mount namespace's guarantees); until
# they land the inner must be told to run without them.
NAMESPACE_FEATURES = {"mount_namespace", "mount_namespace.read_only_host",
                      "mount_namespace.private_shm", "mount_namespace.private_pts",
                      "mount_namespace.protected_paths"}

WRITE_BODY = r'''
attempt("outer workdir", lambda: opened(P["outer"] + "/from-inner", os.O_WRONLY | os.O_CREAT))
attempt("outer tmp", lambda: opened(os.path.dirname(os.environ["TMPDIR"]) + "/from-inner",
                                    os.O_WRONLY | os.O_CREAT))
attempt("inner workdir", lambda: opened("from-inner", os.O_WRONLY | os.O_CREAT))
attempt("inner tmp", lambda: opened(os.environ["TMPDIR"] + "/from-inner",
                                    os.O_WRONLY | os.O_CREAT))
R["tmpdir"] = os.environ["TMPDIR"]
'''


def _inner_dir(sandbox) -> str:
    d = os.path.join(sandbox.workdir, "tool")
    os.mkdir(d)
    os.chown(d, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    return d


def _inner(inner_wd: str, *opts: str, cmd=("true",)) -> list[str]:
    return [CONFINE, "exec", "-w", inner_wd, "-p", "strict", *opts, "--", *cmd]


def test_inner_run_says_what_it_lacks(sandbox):
    """No flag: the inner refuses (exit 125) naming the seccomp listener the outer
    holds, and nothing that works inside the outer (TMPDIR, Landlock, seccomp).
    Control: the same inner command outside any run plans with nothing missing."""
    wd = _inner_dir(sandbox)
    p = sandbox.run(_inner(wd))
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert "internal error" not in p.stderr, p.stderr
    dry = sandbox.run(_inner(wd, "--dry-run", "--json"))
    assert dry.returncode == 0, dry.stderr
    missing = {m["feature"]: m["detail"] for m in json.loads(dry.stdout)["missing"]}
    assert "already has a listener" in missing.get("seccomp_notify", ""), missing
    assert "outside this run's Landlock domain" in missing.get("outer_mediator", ""), missing
    assert set(missing) - NAMESPACE_FEATURES == {"seccomp_notify", "outer_mediator"}, missing
    assert "cannot enforce" in p.stderr, p.stderr
    outside = sandbox.confine(*_inner(wd, "--dry-run", "--json")[1:])
    assert outside.returncode == 0, outside.stderr
    assert json.loads(outside.stdout)["missing"] == [], outside.stdout


@pytest.mark.xfail(strict=True, reason="the outer broker performs mediated file calls in the "
                   "outer Landlock domain: the inner's Landlock is bypassed for them (inner "
                   "refuses without --degrade outer_mediator)")
def test_inner_run_cannot_write_where_only_the_outer_grants(sandbox):
    """The inner (strict, workdir = a subdirectory) cannot create a file in the
    outer's workdir or the outer's TMPDIR; it can in its own workdir and TMPDIR
    (a directory inside the outer's TMPDIR: $TMPDIR is honoured). Control: the
    outer run itself creates the same file in its workdir."""
    wd = _inner_dir(sandbox)
    dry = sandbox.run(_inner(wd, "--dry-run", "--json"))
    assert dry.returncode == 0, dry.stderr
    degrade = []
    for m in json.loads(dry.stdout)["missing"]:
        assert m["feature"] in NAMESPACE_FEATURES | {"seccomp_notify", "outer_mediator"}, m
        degrade += ["--degrade", m["feature"]]
    code = probe_code(WRITE_BODY, {"outer": sandbox.workdir})
    p = sandbox.run(_inner(wd, *degrade, cmd=(PY, "-c", code)))
    r = last_json(p.stdout)
    assert r is not None, (p.returncode, p.stderr)
    tmp = r.pop("tmpdir")
    assert os.path.basename(os.path.dirname(tmp)).startswith("confine-"), tmp
    assert r["inner workdir"] == "ok" and r["inner tmp"] == "ok", r   # control inside
    assert r == {"outer workdir": "EACCES", "outer tmp": "EACCES", "inner workdir": "ok",
                 "inner tmp": "ok"}, (r, p.stderr)
    assert not os.path.exists(os.path.join(sandbox.workdir, "from-inner"))



def test_inner_run_forced_past_its_refusal_still_refuses_at_landlock(sandbox):
    """Told to accept what it lacks (--degrade outer_mediator, seccomp_notify), the
    inner still cannot apply a Landlock domain the outer's broker would bypass: the
    outer refuses landlock_restrict_self, and the inner stops (125) at its landlock
    step, never running the command half-confined. Control: the outer runs it."""
    wd = _inner_dir(sandbox)
    body = 'attempt("read", lambda: read_file("/etc/hostname"))'
    p = sandbox.run(_inner(wd, "--degrade", "outer_mediator", "--degrade", "seccomp_notify",
                           *_namespace_degrades(sandbox, wd),
                           cmd=(PY, "-c", probe_code(body))))
    assert p.returncode == 125 and last_json(p.stdout) is None, (p.stdout, p.stderr)
    assert "landlock" in p.stderr, p.stderr
    control = sandbox.run([PY, "-c", probe_code(body)])
    assert last_json(control.stdout) == {"read": "ok"}, control.stderr


def _namespace_degrades(sandbox, wd: str) -> list[str]:
    dry = sandbox.run(_inner(wd, "--dry-run", "--json"))
    out = []
    for m in json.loads(dry.stdout)["missing"]:
        if m["feature"] in NAMESPACE_FEATURES:
            out += ["--degrade", m["feature"]]
    return out


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

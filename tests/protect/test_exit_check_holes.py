"""The exit check must not give up, be outlasted, be interrupted or be hidden (issue 10).

Each test runs a real confined agent (`confine exec`, as root and as the
unprivileged test account through the `sandbox` fixture) that plants
something the exit check must catch, in a form that broke the check before:

* a symlink chain longer than the kernel's 40 links (os.path.realpath raised
  RecursionError: nothing was reverted, confine exited 125, and the next run
  on the workdir refused to start);
* thousands of sockets from bind() (not mediated) in a protected directory
  (the check was quadratic: 10k entries took half a minute);
* SIGINT, SIGTERM or SIGTSTP sent to confine while the check runs (it died,
  or stopped, with the plant in place and nothing said);
* a directory the agent made unreadable (chmod 0111: unchecked, so its
  plant stayed, when confine was started by the agent's own account);
* file names with escape sequences or bytes that are not UTF-8 (the report
  could be erased from the terminal, or writing REPORT.txt failed and a false
  "NOT CHECKED" was printed);
* old quarantine runs are expired.

The plants are bare repositories (HEAD, objects/, refs/ and a config): the
name guard cannot tell them by name, so the exit check is what catches them.
Each test's control: the same plant is shown to be in place when confine is
not in the way (outside), or a positive control inside.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap
import time

import pytest
from conftest import PY

# The agent exited 0 but the exit check acted: confine exits 123 (session.EXIT_CHECK_ACTED).
ACTED = 123

CHAIN = 1100


def _bare(path: str) -> str:
    """Python source that makes a bare repository at path (relative to the cwd)
    whose config runs a program: a plant the check must catch."""
    return textwrap.dedent(f"""
        import os
        os.makedirs({path!r} + "/objects", exist_ok=True)
        os.makedirs({path!r} + "/refs", exist_ok=True)
        with open({path!r} + "/HEAD", "w") as f:
            f.write("ref: refs/heads/main\\n")
        with open({path!r} + "/config", "w") as f:
            f.write("[core]\\n\\tbare = true\\n\\tfsmonitor = touch /tmp/planted\\n")
    """)


def _quarantine_of(stderr: str) -> str | None:
    m = re.search(r"^confine: quarantine: (.+)$", stderr, re.M)
    return m.group(1) if m else None


def _config_cleaned(path: str) -> bool:
    with open(path) as f:
        return "fsmonitor" not in f.read()


# --- 3: one exception must not disable the whole check -----------------------------------

def test_symlink_chain_is_quarantined_and_the_agent_status_kept(sandbox):
    """A new bare repository whose config is a symlink at the end of a chain
    of 1,100 links: the check quarantines the link, says why, keeps the
    agent's exit status (7), and the next run starts."""
    code = _bare("b") + textwrap.dedent(f"""
        os.unlink("b/config")
        with open("real", "w") as f:
            f.write("[core]\\n\\tpager = touch /tmp/planted\\n")
        prev = "real"
        for i in range({CHAIN}):
            os.symlink(prev, "l%d" % i)
            prev = "l%d" % i
        os.symlink("../" + prev, "b/config")
        print("planted", flush=True)
        raise SystemExit(7)
    """)
    p = sandbox.run([PY, "-c", code])
    assert "planted" in p.stdout, p.stderr
    assert p.returncode == 7, p.stderr
    assert "internal error" not in p.stderr and "NOT CHECKED" not in p.stderr, p.stderr
    assert not os.path.lexists(os.path.join(sandbox.workdir, "b/config")), p.stderr
    assert re.search(r"b/config .*quarantined: symlink chain longer than 40", p.stderr), p.stderr
    q = _quarantine_of(p.stderr)
    assert q and os.path.islink(os.path.join(q, "b/config"))
    # the next run on this workdir starts, with the rest of the chain still there
    p2 = sandbox.run([PY, "-c", "print('second run')"])
    assert p2.returncode == 0 and "second run" in p2.stdout, p2.stderr


def test_symlink_chain_at_start_does_not_stop_the_run(sandbox):
    """A protected symlink (.claude/settings.json) at the end of a long chain
    that the person had before the run: the snapshot and the check resolve
    it with a bounded walk, the run starts, nothing is moved (it did not
    change), and an agent's edit elsewhere is still reverted."""
    wd = sandbox.workdir
    sandbox.outside([PY, "-c", textwrap.dedent(f"""
        import os
        os.mkdir(".claude")
        open("real.json", "w").write("{{}}")
        prev = "real.json"
        for i in range({CHAIN}):
            os.symlink(prev, "l%d" % i)
            prev = "l%d" % i
        os.symlink("../" + prev, ".claude/settings.json")
    """)])
    assert os.path.islink(os.path.join(wd, ".claude/settings.json"))
    p = sandbox.run([PY, "-c", _bare("b") + "print('ran')"])
    assert p.returncode == ACTED and "ran" in p.stdout, p.stderr
    assert "internal error" not in p.stderr
    assert os.path.islink(os.path.join(wd, ".claude/settings.json")), p.stderr
    assert _config_cleaned(os.path.join(wd, "b/config")), p.stderr


# --- 4: the check cannot be outlasted, interrupted or kept out ---------------------------

_SOCKETS = textwrap.dedent("""
    import socket
    os.makedirs("n/.git/hooks", exist_ok=True)
    os.makedirs("n/.git/objects", exist_ok=True)
    os.makedirs("n/.git/refs", exist_ok=True)
    with open("n/.git/HEAD", "w") as f:
        f.write("ref: refs/heads/main\\n")
    for i in range(P["n"]):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("n/.git/hooks/s%05d" % i)
        s.close()
""")


def test_twenty_thousand_sockets_are_all_checked(sandbox):
    """20k sockets bound in the hooks directory of a repository made during
    the run (each one is quarantined on its own): every socket and the
    repository's fsmonitor are gone, and the report is cut short. (The check's
    cost per entry is measured in bench/, not here: the quadratic check once
    took over 20 s for these alone.)"""
    code = "import json\nP = json.loads(%r)\n" % '{"n": 20000}' + _bare("b") + _SOCKETS
    p = sandbox.run([PY, "-c", code], timeout=300)
    assert p.returncode == ACTED, p.stderr[-2000:]
    hooks = os.path.join(sandbox.workdir, "n/.git/hooks")
    assert os.listdir(hooks) == [], len(os.listdir(hooks))
    assert _config_cleaned(os.path.join(sandbox.workdir, "b/config"))
    assert "more change(s) not shown here" in p.stderr      # 10k lines are not printed


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return "gone"
    return data[data.rfind(")") + 2]


def _quarantine_base(sandbox) -> str:
    if sandbox.mode == "root":
        return "/var/lib/confine/quarantine"
    return os.path.join(sandbox.pw.pw_dir, ".local/state/confine/quarantine")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGTSTP])
def test_signals_during_the_check_do_not_stop_it(sandbox, sig):
    """Signals rain on confine while its check of 10k entries runs (from the
    moment its quarantine directory appears, for 300 ms; the check takes
    longer): it neither dies nor stops, finishes, reverts, reports, and
    exits with the agent's status."""
    code = ("import json, signal\nP = json.loads(%r)\n" % '{"n": 10000}' + _bare("b")
            + _SOCKETS + textwrap.dedent("""
        print("done", flush=True)
        os._exit(3)
    """))
    base = _quarantine_base(sandbox)
    proc = sandbox.popen([PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    stopped, sent = False, 0
    try:
        assert proc.stdout.readline().strip() == "done"
        # the run id ends in the supervisor's pid: its quarantine appears once the check runs
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and not any(
                n.endswith(f"-{proc.pid}") for n in (os.listdir(base) if os.path.isdir(base)
                                                     else ())):
            time.sleep(0.001)
        end = time.monotonic() + 0.3
        while time.monotonic() < end and proc.poll() is None:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                break
            sent += 1
            time.sleep(0.002)
            stopped = stopped or _state(proc.pid) == "T"
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sent > 10, sent
    assert not stopped
    assert proc.returncode == 3, (proc.returncode, err[-2000:])
    assert "PROTECTED PATHS WERE CHANGED" in err, err[-2000:]
    assert os.listdir(os.path.join(sandbox.workdir, "n/.git/hooks")) == []
    assert _config_cleaned(os.path.join(sandbox.workdir, "b/config"))
    if sig != signal.SIGTSTP:
        assert f"{signal.Signals(sig).name} received: held until the exit check" in err


def test_unreadable_directory_is_opened_and_checked(sandbox):
    """A bare repository planted in a directory the agent then makes
    unreadable (0111): the check gives the directory back u+rwx, finds the
    repository and cleans its config; as the control, the plant is there
    (read as root) before the check would run: the same agent without
    confine's check leaves it."""
    code = _bare("hidden/b") + "os.chmod('hidden', 0o111)\nprint('ok')\n"
    p = sandbox.run([PY, "-c", code])
    assert p.returncode == ACTED and "ok" in p.stdout, p.stderr
    hidden = os.path.join(sandbox.workdir, "hidden")
    assert _config_cleaned(os.path.join(hidden, "b/config")), p.stderr
    if sandbox.mode == "user":     # root reads it as it is; the agent's account needs u+rwx
        assert os.stat(hidden).st_mode & 0o700 == 0o700
    assert "NOT CHECKED" not in p.stderr and "fsmonitor" in p.stderr


def test_unreadable_directory_plant_is_there_without_the_check(sandbox):
    """The control of the test above: the same plant made outside confine."""
    code = _bare("hidden/b") + "os.chmod('hidden', 0o111)\n"
    p = sandbox.outside([PY, "-c", code])
    assert p.returncode == 0, p.stderr
    assert not _config_cleaned(os.path.join(sandbox.workdir, "hidden/b/config"))
    os.chmod(os.path.join(sandbox.workdir, "hidden"), 0o755)


# --- 14: the report cannot be hidden -----------------------------------------------------

def test_names_cannot_hide_or_break_the_report(sandbox):
    """A bare repository named with an escape sequence that erases lines
    and a byte that is not UTF-8: the report shows the name escaped, the
    terminal gets no escape character, REPORT.txt is written, and no false
    "NOT CHECKED" appears."""
    name = "b\x1b[2K\x1b[1A\xff"
    code = textwrap.dedent("""
        import os
        d = os.fsencode("b") + b"\\x1b[2K\\x1b[1A\\xff"
        os.makedirs(d + b"/objects"); os.makedirs(d + b"/refs")
        open(d + b"/HEAD", "w").write("ref: refs/heads/main\\n")
        open(d + b"/config", "w").write("[core]\\n\\tfsmonitor = touch /tmp/planted\\n")
    """)
    p = subprocess.run(sandbox.exec_cmd([PY, "-c", code]), capture_output=True,
                       cwd=sandbox.workdir, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == ACTED, err
    assert b"\x1b" not in p.stderr, err
    assert "NOT CHECKED" not in err and "could not write" not in err, err
    assert "b\\x1b[2K\\x1b[1A\\xff/config" in err, err
    assert name not in err
    cfg = os.path.join(os.fsencode(sandbox.workdir), os.fsencode("b") + b"\x1b[2K\x1b[1A\xff",
                       b"config")
    with open(cfg) as f:
        assert "fsmonitor" not in f.read()
    q = _quarantine_of(err)
    with open(os.path.join(q, "REPORT.txt"), "rb") as f:
        report = f.read()
    assert b"b\\x1b[2K\\x1b[1A\\xff/config" in report and b"\x1b" not in report


# --- 10: old quarantine runs expire ------------------------------------------------------

def test_old_quarantine_runs_expire(sandbox):
    """Runs older than 30 days in the default quarantine directory are
    removed by the next run (so are all but the newest 100); a recent one and
    foreign names stay."""
    if sandbox.mode == "root":
        base = "/var/lib/confine/quarantine"
        owner = (0, 0)
    else:
        base = os.path.join(sandbox.pw.pw_dir, ".local/state/confine/quarantine")
        owner = (sandbox.pw.pw_uid, sandbox.pw.pw_gid)
    os.makedirs(base, exist_ok=True)
    for d in (os.path.dirname(os.path.dirname(base)), os.path.dirname(base), base):
        if d.startswith(sandbox.pw.pw_dir):
            os.chown(d, *owner)
    # recent: a minute old, so among the newest runs kept even in a busy shared directory
    recent = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() - 60)) + f"-{os.getpid()}"
    made = {"20000101-000000-%d" % os.getpid(): True, recent: False,
            "not-a-run-%d" % os.getpid(): False}
    for n, _ in made.items():
        os.makedirs(os.path.join(base, n, "deep/er"), exist_ok=True)
        for dp, dn, fn in os.walk(os.path.join(base, n)):
            os.chown(dp, *owner)
    try:
        p = sandbox.run([PY, "-c", _bare("b")])
        assert p.returncode == ACTED, p.stderr
        for n, expired in made.items():
            assert os.path.exists(os.path.join(base, n)) != expired, n
        assert _quarantine_of(p.stderr) is not None          # this run's own stays
        assert os.path.isdir(_quarantine_of(p.stderr))
    finally:
        for n in made:
            subprocess.run(["rm", "-rf", os.path.join(base, n)])


# --- the exit status: the check's own failure never replaces it ---------------------------

def test_a_failing_check_keeps_the_agent_status_and_says_so(root_sandbox):
    """An error inside the check (injected: verify_and_revert raises) is said
    loudly, the agent's status (9) is returned, and nothing escapes as an
    exception; the control is the same run with the check intact."""
    from childrun import fork_json
    wd = root_sandbox.workdir

    def go(inject: bool) -> dict:
        from confine import api, protect
        if inject:
            def boom(*a: object, **k: object) -> None:
                raise RuntimeError("injected \x1b[2K failure")
            protect.verify_and_revert = boom
        msgs: list[str] = []
        r = api.run_result(["/bin/sh", "-c", "exit 9"], workdir=wd, warn=msgs.append)
        return {"status": r.status, "msgs": msgs, "report": r.report is not None}

    for inject in (False, True):
        res = fork_json(lambda inject=inject: go(inject), 60)
        assert res["ok"], res.get("tb")
        v = res["value"]
        assert v["status"] == 9, v
        not_checked = [m for m in v["msgs"] if "NOT CHECKED" in m]
        if inject:
            assert not_checked and "RuntimeError" in not_checked[0] and "\x1b" not in not_checked[0]
            assert not v["report"]
        else:
            assert not not_checked and v["report"], v


# --- the exit status when the check acted (issue 11 item 9) ------------------------------

def test_a_plant_turns_the_agents_zero_into_123(sandbox):
    """The agent exits 0 after planting a bare repository whose config runs a
    program: the check quarantines it and confine exits 123, saying why and that
    --agent-status keeps 0; a nonzero agent status is kept as it is; a clean run
    (the control) exits 0."""
    clean = sandbox.run([PY, "-c", "print('ok')"])
    assert clean.returncode == 0 and "exit status 123" not in clean.stderr, clean.stderr
    p = sandbox.run([PY, "-c", _bare("b1")])
    assert p.returncode == ACTED, p.stderr
    assert "exit status 123: the agent exited 0" in p.stderr and "--agent-status" in p.stderr
    kept = sandbox.run([PY, "-c", _bare("b2")], "--agent-status")
    assert kept.returncode == 0 and "PROTECTED PATHS WERE CHANGED" in kept.stderr, kept.stderr
    own = sandbox.run([PY, "-c", _bare("b3") + "raise SystemExit(5)"])
    assert own.returncode == 5 and "exit status 123" not in own.stderr, own.stderr

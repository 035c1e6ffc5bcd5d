"""confine.Sandbox: the prepared object of the Python API (issue 13 goal 3).

Each test runs a small Python program as the launcher (root, or the test
account) that builds one Sandbox and runs real confined commands through it:
capture of stdout/stderr, stdin from bytes, a timeout that ends the agent and
everything it started, the same protections as `confine exec` on every run.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap

from conftest import PREFIX

API_PY = os.path.join(PREFIX, "bin", "python")


def _api(sandbox, body: str, timeout: float = 120, relink=None) -> dict:
    """Run `body` (it sets `out`) as the launcher of `sandbox`; returns out.
    relink: called when the program prints its line, before it goes on."""
    code = textwrap.dedent("""
        import json, os, sys
        import confine
        WD = sys.argv[1]
        out = {}
    """) + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    argv = sandbox.cmd([])[:-1] + [API_PY, "-c", code, sandbox.workdir]
    if relink is None:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           cwd=sandbox.workdir)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=sandbox.workdir) as q:
        assert q.stdout is not None and q.stdin is not None
        first = q.stdout.readline()
        assert "relink" in first, (first, q.stderr.read() if q.stderr else "")
        relink()
        rest, err = q.communicate("go\n", timeout=timeout)
    assert q.returncode == 0, err
    return json.loads(rest.strip().splitlines()[-1])


def test_capture_input_and_status(sandbox):
    out = _api(sandbox, """
        with confine.Sandbox(workdir=WD) as sb:
            r = sb.run(["/bin/sh", "-c", "echo out; echo err >&2; cat; exit 3"],
                       input=b"from stdin\\n", capture=True)
            out["first"] = [r.status, r.stdout.decode(), r.stderr.decode(), r.timed_out]
            r = sb.run(["/bin/sh", "-c", "id -u; cat"], capture=True)   # stdin: /dev/null
            out["second"] = [r.status, r.stdout.decode()]
    """)
    assert out["first"] == [3, "out\nfrom stdin\n", "err\n", False], out
    status, text = out["second"]
    assert status == 0 and text.strip() == str(sandbox.agent.pw_uid), out


def test_not_found_is_a_status_and_captured_runs_keep_confines_lines(sandbox):
    """Issue 23 item 7: the API gives 127/126 where `confine exec` exits with them (not an
    exception), and with capture=True confine's own lines go to Completed.messages, not to
    the caller's stderr. Control: without capture they are on the caller's stderr."""
    code = textwrap.dedent("""
        import json, os, sys
        import confine
        WD = sys.argv[1]
        out = {}
        with confine.Sandbox(workdir=WD) as sb:
            r = sb.run(["no-such-command-xyz"], capture=True)
            out["nf"] = [r.status, r.messages]
            r = sb.run(["./noexec"], capture=True)
            out["nx"] = [r.status, r.messages]
            r = sb.run(["/bin/sh", "-c", "echo x > /etc/confine-test-planted"], capture=True)
            out["refused"] = [r.status, r.messages, r.stderr.decode()]
        sys.stdout.flush()
        print("--- uncaptured", file=sys.stderr, flush=True)
        out["run"] = confine.run(["no-such-command-xyz"], workdir=WD)
        print(json.dumps(out))
    """)
    with open(os.path.join(sandbox.workdir, "noexec"), "w") as f:
        f.write("#!/bin/sh\necho no\n")
    os.chmod(os.path.join(sandbox.workdir, "noexec"), 0o644)
    argv = sandbox.cmd([])[:-1] + [API_PY, "-c", code, sandbox.workdir]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=sandbox.workdir)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    status, msgs = out["nf"]
    assert status == 127 and any("no-such-command-xyz: command not found" in m for m in msgs)
    status, msgs = out["nx"]
    assert status == 126 and any("cannot execute" in m for m in msgs), msgs
    status, msgs, err = out["refused"]
    assert status != 0 and "confine-test-planted" in err      # the agent's own error
    captured, uncaptured = p.stderr.split("--- uncaptured")
    assert "confine:" not in captured, captured
    assert out["run"] == 127
    assert "confine: no-such-command-xyz: command not found" in uncaptured, uncaptured


def test_every_run_is_confined(sandbox):
    """The boundary holds on the second run as on the first: writing outside
    the workdir is refused, reading a secret is refused (controls: the workdir
    is writable; the file outside exists)."""
    secret = os.path.join(sandbox.home, ".ssh")
    out = _api(sandbox, f"""
        with confine.Sandbox(workdir=WD) as sb:
            res = []
            for i in range(2):
                r = sb.run(["/bin/sh", "-c",
                            "echo x > ok$$ && echo wrote; echo y > {sandbox.home}/planted$$ "
                            "2>/dev/null || echo refused; ls {secret} >/dev/null 2>&1 "
                            "|| echo secret-refused"], capture=True)
                res.append(r.stdout.decode().split())
            out["res"] = res
    """)
    assert out["res"] == [["wrote", "refused", "secret-refused"]] * 2, out
    assert not [n for n in os.listdir(sandbox.home) if n.startswith("planted")]


def test_timeout_kills_the_agent_and_what_it_started(sandbox):
    """A background sleeper that setsid()s away is gone after the timeout
    (its pid, written by the agent, no longer runs); the control run without a
    timeout finishes normally."""
    out = _api(sandbox, """
        with confine.Sandbox(workdir=WD) as sb:
            r = sb.run(["/bin/sh", "-c",
                        "setsid sleep 313 & echo $! > bg.pid; sleep 313"],
                       capture=True, timeout=1.5)
            out["t"] = [r.status, r.timed_out]
            r = sb.run(["/bin/sh", "-c", "exit 0"], capture=True, timeout=60)
            out["c"] = [r.status, r.timed_out]
    """)
    assert out["t"] == [137, True] and out["c"] == [0, False], out
    with open(os.path.join(sandbox.workdir, "bg.pid")) as f:
        inner = f.read().strip()
    assert inner.isdigit()
    # The pid is the agent's view (its own pid namespace, when it has one): look for
    # any sleep 313 of the agent's uid still alive on the host instead.
    alive = subprocess.run(["pgrep", "-u", str(sandbox.agent.pw_uid), "-f", "sleep 313"],
                           capture_output=True, text=True)
    assert alive.stdout.strip() == "", alive.stdout


def test_unknown_option_is_refused_before_any_run(sandbox):
    out = _api(sandbox, """
        try:
            confine.Sandbox(workdir=WD, bogus=1)
        except TypeError as e:
            out["err"] = str(e)
    """)
    assert "bogus" in out["err"], out


def test_nothing_of_a_run_outlives_it(sandbox):
    """After runs that offered the nested-run endpoint (control: the agent saw
    it in its environment), the launcher has no child left: the endpoint's
    server ends with each run instead of living on until the program exits."""
    from confine.runtime import delegate
    out = _api(sandbox, f"""
        def kids():
            got = []
            for t in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{{t}}/children") as f:
                    got += f.read().split()
            return got
        with confine.Sandbox(workdir=WD) as sb:
            seen = []
            for i in range(3):
                r = sb.run(["/bin/sh", "-c", "echo ${{{delegate.ENV}:-none}}"], capture=True)
                seen.append(r.stdout.decode().strip())
                out.setdefault("after", []).append(kids())
        out["seen"] = seen
        # nor a descriptor of it: the mount namespace held through the run's exit
        links = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink("/proc/self/fd/" + fd))
            except OSError:
                pass                       # the listing's own descriptor
        out["ns"] = [x for x in links if x.startswith("mnt:")]
        out["mine"] = os.readlink("/proc/self/ns/mnt")
    """)
    assert all(s.endswith(delegate.SOCKET_NAME) for s in out["seen"]), out
    assert out["after"] == [[], [], []], out
    assert out["ns"] == [] and out["mine"].startswith("mnt:"), out


def test_the_child_is_born_in_the_runs_cgroup(root_sandbox):
    """A single-threaded launcher forks the child straight into the run's cgroup
    (clone3 CLONE_INTO_CGROUP: no migration to wait for); one with another thread
    forks and moves it, as before. Either way the agent is in the run's own cgroup
    (control: the launcher itself is not) and the run behaves the same."""
    out = _api(root_sandbox, """
        import threading
        from confine.kernel import cgroup
        moves = []
        real = cgroup.move
        cgroup.move = lambda path, pid: (moves.append(pid), real(path, pid))[1]
        def where():
            with open("/proc/self/cgroup") as f:
                return [x for x in f.read().splitlines() if x.startswith("0::")][0]
        cmd = ["/bin/sh", "-c", "grep ^0:: /proc/self/cgroup; echo x > born"]
        with confine.Sandbox(workdir=WD) as sb:
            r = sb.run(cmd, capture=True)
            out["single"] = [r.status, r.stdout.decode().strip(), len(moves)]
            stop = threading.Event()
            t = threading.Thread(target=stop.wait)
            t.start()
            r = sb.run(cmd, capture=True)
            stop.set()
            t.join()
            out["threaded"] = [r.status, r.stdout.decode().strip(), len(moves)]
        out["launcher"] = where()
    """)
    for key, want_moves in (("single", 0), ("threaded", 1)):
        status, line, moves = out[key]
        assert status == 0 and moves == want_moves, out
        assert line.startswith("0::/") and "/confine-" in line, out
        assert line != out["launcher"], out
    assert os.path.exists(os.path.join(root_sandbox.workdir, "born"))


def test_signals_at_every_moment_of_the_fork(root_sandbox):
    """A launcher whose SIGALRM handler fires every half millisecond (through the
    fork into the cgroup and everything around it) still gets every run right, and
    stays able to import and fork afterwards (the import lock was released on both
    sides). Control: the handler did run, many times."""
    out = _api(root_sandbox, """
        import signal, subprocess
        hits = []
        signal.signal(signal.SIGALRM, lambda *_: hits.append(1))
        signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
        res = []
        with confine.Sandbox(workdir=WD) as sb:
            for i in range(10):
                r = sb.run(["/bin/sh", "-c", f"echo {i}"], capture=True)
                res.append([r.status, r.stdout.decode().strip()])
        signal.setitimer(signal.ITIMER_REAL, 0)
        import xml.dom.minidom  # noqa: F401 - an import after the runs
        out["res"] = res
        out["hits"] = len(hits)
        out["after"] = subprocess.run(["/bin/echo", "ok"], capture_output=True).stdout.decode()
    """)
    assert out["res"] == [[0, str(i)] for i in range(10)], out
    assert out["hits"] > 10 and out["after"] == "ok\n", out


def test_each_run_resolves_the_profile_paths_again(sandbox):
    """A secret named through a symlink is carved out where the link points at
    each run: relinked between two runs of one Sandbox, the second run refuses
    the new target and reads the old one (the paths a preparation resolves are
    kept for that preparation only)."""
    import shutil
    import tempfile
    base = tempfile.mkdtemp(prefix="confine-relinked-", dir="/var/tmp")
    try:
        _relinked(sandbox, base)
    finally:
        shutil.rmtree(base)


def _relinked(sandbox, base: str) -> None:
    os.chmod(base, 0o755)
    for v in ("v1", "v2"):
        os.mkdir(os.path.join(base, v), 0o755)
        with open(os.path.join(base, v, "secret"), "w") as f:
            f.write(v)
        os.chmod(os.path.join(base, v, "secret"), 0o644)
    link = os.path.join(base, "current")
    os.symlink("v1", link)
    prof = os.path.join(sandbox.workdir, "relinked.yaml")
    with open(prof, "w") as f:
        f.write(f"extends: default\nfilesystem:\n  read:\n    - {base}\n  deny:\n    - {link}\n")
    if os.geteuid() == 0:
        os.chown(prof, sandbox.pw.pw_uid, sandbox.pw.pw_gid)
    cmd = f"for v in v1 v2; do cat {base}/$v/secret 2>/dev/null || echo refused; echo; done"
    out = _api(sandbox, f"""
        with confine.Sandbox(workdir=WD, profile={prof!r}) as sb:
            out["first"] = sb.run(["/bin/sh", "-c", {cmd!r}], capture=True).stdout.decode().split()
            print(json.dumps({{"relink": True}}), flush=True)
            sys.stdin.readline()
            out["second"] = sb.run(["/bin/sh", "-c", {cmd!r}], capture=True).stdout.decode().split()
    """, relink=lambda: (os.symlink("v2", link + ".new"), os.rename(link + ".new", link)))
    assert out == {"first": ["refused", "v2"], "second": ["v1", "refused"]}, out


def test_the_child_waits_for_every_landlock_rule(sandbox):
    """The supervisor adds the ruleset's rules while the child runs its first
    steps (runtime/launch.py); the child enforces it only once all are in. With
    the supervisor slowed down, the agent still has every grant (it runs, reads
    the system, writes the workdir); a rule that cannot be added refuses the run
    (125, one line naming it) and the agent never runs."""
    out = _api(sandbox, """
        import time
        import confine.runtime.launch as L
        from confine.errors import ConfineError
        orig = L._add_rules
        def slow(rs, plan):
            time.sleep(0.5)
            orig(rs, plan)
        def bad(rs, plan):
            raise OSError(13, "Landlock rule for /nowhere: Permission denied")
        with confine.Sandbox(workdir=WD) as sb:
            L._add_rules = slow
            r = sb.run(["/bin/sh", "-c", "head -c 0 /etc/passwd && echo x > slow.out && echo ok"],
                       capture=True)
            out["slow"] = [r.status, r.stdout.decode().strip(), os.path.exists("slow.out")]
            L._add_rules = bad
            try:
                sb.run(["/bin/sh", "-c", "echo x > bad.out"], capture=True)
                out["bad"] = "ran"
            except ConfineError as e:
                out["bad"] = [e.status, str(e), os.path.exists("bad.out")]
    """)
    assert out["slow"] == [0, "ok", True], out
    status, msg, ran = out["bad"]
    assert status == 125 and "Landlock rule for /nowhere" in msg and "\n" not in msg, out
    assert ran is False, out


def test_a_kept_change_report_serves_the_next_run_and_closes_with_the_sandbox(root_sandbox):
    """A Sandbox keeps the last run's fanotify group (protect/changes.py) and
    restarts it for the next run instead of paying its teardown each time. The
    restarted group still reports what happens during the run: another process
    makes .envrc below a vouched directory (mtime put back) while the agent
    waits, and the exit check finds it from the reports. Closing the Sandbox
    closes the group (control: it was open before)."""
    for rel in ("p", "p/q", "p/q/r", "p/q/r/s"):
        os.mkdir(os.path.join(root_sandbox.workdir, rel))
        os.lchown(os.path.join(root_sandbox.workdir, rel), root_sandbox.agent.pw_uid,
                  root_sandbox.agent.pw_gid)
    out = _api(root_sandbox, """
        import threading, time
        from confine.protect import changes, index
        changes.WORTH_DIRS = 0                 # this tree is small: mark it all the same
        racy = index.RACY_NS / 1e9 + 0.2
        def fanotify_fds():
            got = []
            for fd in os.listdir("/proc/self/fd"):
                try:
                    got += [fd] if "fanotify" in os.readlink("/proc/self/fd/" + fd) else []
                except OSError:
                    pass
            return got
        def other():
            while not os.path.exists(os.path.join(WD, "started")):
                time.sleep(0.02)
            d = os.path.join(WD, "p/q/r/s")
            st = os.stat(d)
            with open(os.path.join(d, ".envrc"), "w") as f:
                f.write("export X=1\\n")
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
            open(os.path.join(WD, "go"), "w").close()
        with confine.Sandbox(workdir=WD) as sb:
            time.sleep(racy)
            sb.run(["true"])                   # stores the index
            time.sleep(racy)
            sb.run(["true"])
            first = sb._changes
            r_, w_ = os.pipe()
            pid = os.fork()
            if pid == 0:                       # a forked copy must not share the queue
                try:
                    sb.run(["true"])
                    os.write(w_, b"1" if sb._changes is not first else b"0")
                finally:
                    os._exit(0)
            os.close(w_)
            out["fork"] = os.read(r_, 1).decode()
            os.waitpid(pid, 0)
            t = threading.Thread(target=other)
            t.start()
            r = sb.run(["/bin/sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.02; done"],
                       capture=True)
            t.join()
            out["kept"] = first is not None and sb._changes is first
            out["walk"] = r.report.exit_walk
            out["alerts"] = [c.path for c in r.report.alerts]
            out["open"] = len(fanotify_fds())
        out["closed"] = len(fanotify_fds())
    """)
    assert out["kept"] and out["fork"] == "1", out
    assert out["walk"].startswith("the kernel's reports"), out
    assert "p/q/r/s/.envrc" in out["alerts"], out
    assert not os.path.exists(os.path.join(root_sandbox.workdir, "p/q/r/s/.envrc"))
    assert out["open"] == 1 and out["closed"] == 0, out

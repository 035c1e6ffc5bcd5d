"""Every process the agent started is dead when `confine exec` returns (issue 10, item 8).

Without a pid namespace (every container, every host without user namespaces)
nothing takes the agent's processes with it: the supervisor must find and kill
them all before the exit check runs, or a survivor keeps writing the workdir
during the check and reads what the user types afterwards. Each test makes
its processes recognisable on the host by a random process name (comm) and
looks for them there after confine returned; the control is the same tree
seen alive while the agent still runs (it reports the count it started).
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import textwrap
import time

import pytest
from conftest import PY, pty_run

pytestmark = pytest.mark.e2e

# Shared by the agents below: name this process, tell the parent, sleep.
LIB = textwrap.dedent("""
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    TAG = sys.argv[1].encode()
    def name():
        libc.prctl(15, TAG, 0, 0, 0)            # PR_SET_NAME
    def count():
        n = 0
        for p in os.listdir('/proc'):
            try:
                with open(f'/proc/{p}/comm', 'rb') as f:
                    n += f.read().strip() == TAG
            except OSError:
                pass
        return n
""")

# A chain DEPTH processes deep: each forks the next and sleeps; the last
# reports ready through the pipe. With SETSID each level starts a new session
# (and process group), the usual way a daemon tries to get away.
CHAIN = LIB + textwrap.dedent("""
    DEPTH, SETSID = int(sys.argv[2]), sys.argv[3] == "1"
    r, w = os.pipe()
    for level in range(DEPTH):
        if os.fork() != 0:
            if level == 0:
                break
            name()
            os.close(w)
            while True:
                time.sleep(60)
        if SETSID:
            os.setsid()
        name()                                  # before the next fork: counted when ready
    else:
        name()
        os.write(w, b"r")
        while True:
            time.sleep(60)
    os.close(w)
    assert os.read(r, 1) == b"r"
    print("started", count(), flush=True)
""")

# Processes that keep forking while the supervisor is killing: every child
# forks again at once and its parent exits (the tree keeps moving).
STORM = LIB + textwrap.dedent("""
    WIDTH = int(sys.argv[2])
    for _ in range(WIDTH):
        if os.fork() == 0:
            name()
            while True:
                try:
                    if os.fork() != 0:
                        os._exit(0)
                    name()
                except OSError:
                    time.sleep(0.01)
    time.sleep(0.5)
    print("started", count(), flush=True)
""")

# Processes that undo the freeze: each keeps sending SIGCONT to its whole
# process group (and a new session each, so groups multiply) while forking.
UNFREEZE = LIB + textwrap.dedent("""
    import signal
    WIDTH = int(sys.argv[2])
    for _ in range(WIDTH):
        if os.fork() == 0:
            name()
            os.setsid()
            while True:
                try:
                    os.killpg(0, signal.SIGCONT)
                    if os.fork() == 0:
                        name()
                        continue
                except OSError:
                    pass
                time.sleep(0.001)
    time.sleep(0.5)
    print("started", count(), flush=True)
""")


def _tag() -> str:
    return "cfk" + secrets.token_hex(4)


def _survivors(tag: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/comm") as f:
                if f.read().strip() != tag:
                    continue
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        if st[st.rfind(")") + 2] != "Z":
            out.append(int(p))
    return out


def _cleanup(tag: str) -> None:
    for _ in range(50):
        pids = _survivors(tag)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def _layers(sandbox, layers):
    return sandbox.without_namespaces() if layers == "landlock" else sandbox


@pytest.mark.parametrize("layers", ["all", "landlock"])
@pytest.mark.parametrize("setsid", ["0", "1"])
def test_deep_chain_is_dead_when_confine_returns(sandbox, layers, setsid):
    """150 levels: more than the old 100 rounds of killing direct children."""
    sb, tag = _layers(sandbox, layers), _tag()
    try:
        p = sb.run([PY, "-c", CHAIN, tag, "150", setsid], timeout=120)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == ["started", "150"]     # control: all were alive inside
        assert _survivors(tag) == []
    finally:
        _cleanup(tag)


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_forking_storm_is_dead_when_confine_returns(sandbox, layers):
    """Processes that fork as fast as they can while the supervisor kills them."""
    sb, tag = _layers(sandbox, layers), _tag()
    try:
        p = sb.run([PY, "-c", STORM, tag, "8"], timeout=120)
        assert p.returncode == 0, p.stderr
        assert int(p.stdout.split()[1]) >= 1              # control: the storm ran
        assert _survivors(tag) == []
    finally:
        _cleanup(tag)


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_processes_that_resume_each_other_are_dead_when_confine_returns(sandbox, layers):
    sb, tag = _layers(sandbox, layers), _tag()
    try:
        p = sb.run([PY, "-c", UNFREEZE, tag, "4"], "-p", _few_processes(sb), timeout=120)
        assert p.returncode == 0, p.stderr
        assert int(p.stdout.split()[1]) >= 4             # control: they ran
        assert _survivors(tag) == []
    finally:
        _cleanup(tag)


def _few_processes(sb) -> str:
    """A profile that caps the run at 200 tasks: the storm stays small on a shared host."""
    path = os.path.join(sb.workdir, "few.yaml")
    with open(path, "w") as f:
        f.write("extends: default\nlimits:\n  processes: 200\n")
    if os.geteuid() == 0:
        os.chown(path, sb.pw.pw_uid, sb.pw.pw_gid)
    return path


# The agent puts itself in the terminal's foreground (as an interactive shell
# does), leaves a process behind in that group and exits; after confine
# returned the terminal must belong to the launcher's group again, else a
# background leftover (or the next one) would be the one reading the user's keys.
FOREGROUND = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    os.setpgid(0, 0)
    fd = os.open("/dev/tty", os.O_RDWR)
    os.tcsetpgrp(fd, os.getpgrp())
    print("fg", os.tcgetpgrp(fd) == os.getpgrp(), flush=True)
    if os.fork() == 0:
        time.sleep(60)
""")

AFTER = ("import os; fd = os.open('/dev/tty', os.O_RDWR); "
         "print('after', os.tcgetpgrp(fd) == os.getpgrp())")


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_terminal_foreground_comes_back(sandbox, layers):
    sb = _layers(sandbox, layers)
    inner = " ".join(_q(a) for a in sb.exec_cmd([PY, "-c", FOREGROUND]))
    script = f"{inner}; {PY} -c {_q(AFTER)}"
    status, out = pty_run(["/bin/sh", "-c", script], timeout=60, cwd=sb.workdir)
    text = out.decode(errors="replace")
    assert "fg True" in text, text                        # control: the agent did take it
    assert "after True" in text, text


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


CGROUP = "print('cgroup', [l for l in open('/proc/self/cgroup') if l.startswith('0::')][0].strip())"


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_run_cgroup_when_one_can_be_made(sandbox, layers):
    """Where --dry-run names a cgroup of the run, the agent is in it while it runs
    and it is gone afterwards; where it names none, the agent stays in the
    launcher's cgroup (leftovers then go by the descendant walk alone)."""
    import json
    sb = _layers(sandbox, layers)
    dry = sb.confine("exec", "--dry-run", "--json", "-w", sb.workdir, *sb.opts, "--", "true")
    cg = json.loads(dry.stdout)["cgroup"]
    p = sb.run([PY, "-c", CGROUP])
    assert p.returncode == 0, p.stderr
    inside = p.stdout.split()[1][3:]
    if cg is None:
        assert "/confine-" not in inside
        if sb.mode == "root":
            pytest.fail("started as root with a cgroup2 mount, the run should get a cgroup")
        return
    assert inside.rsplit("/", 1)[-1].startswith("confine-"), inside
    path = os.path.join(cg["parent"], inside.rsplit("/", 1)[-1])
    assert not os.path.exists(path), f"{path} left behind"


def test_a_recycled_pid_is_never_signalled():
    """The walk signals through pidfds opened only while /proc still shows the
    scanned parent and start time: a process that merely has a scanned pid
    (recycled: here, a wrong start time stands for it) is left alone. Control:
    with the right start time the same call kills it."""
    import subprocess

    from confine.runtime import supervise
    p = subprocess.Popen(["sleep", "30"])
    try:
        seen = supervise.scan()[p.pid]
        held = supervise._Held()
        held.signal(p.pid, seen._replace(start=seen.start + 1), signal.SIGKILL)
        time.sleep(0.1)
        assert p.poll() is None                      # not signalled
        held.signal(p.pid, seen, signal.SIGKILL)
        assert p.wait(timeout=5) == -signal.SIGKILL  # control
        held.close()
    finally:
        p.kill()
        p.wait()


def test_descendants_parents_first_and_spared_children():
    from confine.runtime.supervise import Proc, descendants
    t = {2: Proc(1, 0, "S"), 3: Proc(2, 0, "S"), 4: Proc(3, 0, "S"), 5: Proc(1, 0, "S"),
         9: Proc(8, 0, "S")}
    out = descendants(1, t)
    assert sorted(out) == [2, 3, 4, 5] and out.index(2) < out.index(3) < out.index(4)


def test_own_children_include_those_a_thread_forked_and_no_grandchild():
    """own_children() (the embedding program's children, spared by the leftover
    walk) reads each thread's /proc children list: a child started from another
    thread is a child of that thread, and must be there too. A grandchild is
    not (the walk kills it if it is a leftover). Control: the full /proc scan
    agrees."""
    import subprocess
    import threading

    from confine.runtime import supervise
    procs: list[subprocess.Popen] = []
    t = threading.Thread(target=lambda: procs.append(subprocess.Popen(["sleep", "30"])))
    t.start()
    t.join()
    direct = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & wait"])
    procs.append(direct)
    try:
        deadline = time.monotonic() + 5
        while not supervise.children_of(direct.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        grand = supervise.children_of(direct.pid)
        assert grand, "the shell's sleep did not start"
        got = {pid for pid, _ in supervise.own_children()}
        assert procs[0].pid in got and direct.pid in got
        assert not set(grand) & got
        me = os.getpid()
        assert got == {c for c, p in supervise.scan().items() if p.ppid == me}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_no_children_counts_every_child_but_the_spared():
    """The leftover walk's last word (supervise._no_children): a child of this
    process that is not spared, even one the scan before did not see, keeps the
    walk going; spared children do not. Control: without children it is True."""
    import subprocess

    from confine.runtime import supervise
    before = supervise.own_children()
    assert supervise._no_children(before)
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert not supervise._no_children(before)
        assert supervise._no_children(supervise.own_children())
    finally:
        p.kill()
        p.wait()
    assert supervise._no_children(before)


def test_single_threaded_walk_without_children_returns_at_once_and_kills_the_rest():
    """The walk's shortcut (one thread, no child but the spared): it returns without
    the full scan and a spared child lives on; a child that is not spared is found
    and killed (control: it was alive until the walk)."""
    import subprocess

    from confine.runtime import supervise
    assert supervise._one_thread()
    kept = subprocess.Popen(["sleep", "30"])
    try:
        spare = supervise.own_children()
        scans = []
        real = supervise.scan
        supervise.scan = lambda: (scans.append(1), real())[1]
        try:
            assert supervise.kill_leftovers(spare) == [] and scans == []
            assert kept.poll() is None
            extra = subprocess.Popen(["sleep", "30"])
            assert extra.poll() is None
            assert supervise.kill_leftovers(spare) == [] and scans
            assert extra.poll() is not None and kept.poll() is None
        finally:
            supervise.scan = real
    finally:
        kept.kill()
        kept.wait()


# A child that hides: a new session, then non-dumpable (one prctl), which a /proc
# mounted with hidepid (systemd's ProtectProc=invisible: confine's own exported unit)
# turns into a process whose /proc entry the supervisor's account cannot read. The
# agent says whether its own view (the same account unprivileged) lost the child.
HIDING = LIB + textwrap.dedent("""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        name()
        libc.prctl(4, 0, 0, 0, 0)               # PR_SET_DUMPABLE 0
        os.write(w, b"r")
        while True:
            time.sleep(60)
    assert os.read(r, 1) == b"r"
    try:
        open(f"/proc/{pid}/stat").read()
        seen = "visible"
    except OSError:
        seen = "hidden"
    print("started", count(), seen, flush=True)
""")

HIDEPID = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
           'mount -t proc -o hidepid=invisible proc /proc && exec "$@"', "sh"]


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_a_child_that_hides_from_proc_is_dead_when_confine_returns(sandbox, layers):
    """Under hidepid a non-dumpable process is missing from every scan of /proc an
    unprivileged supervisor makes: it used to be taken for gone, outlive the run and
    write the workdir during the exit check (and, with undo on, keep the run's end
    waiting 10 s for the keeper). It is still among the supervisor's children, and
    killed from there. Control: the agent saw it hide, and alive (root's supervisor
    sees it anyway: the same kill, by the scan; with namespaces, the end of the pid
    namespace takes it)."""
    sb, tag = _layers(sandbox, layers), _tag()
    try:
        p = subprocess.run(HIDEPID + sb.exec_cmd([PY, "-c", HIDING, tag]), capture_output=True,
                           text=True, timeout=60, cwd=sb.workdir)
        assert p.returncode == 0, p.stderr
        started, seen = p.stdout.split()[1:3]
        if layers == "landlock":
            assert started == "0" and seen == "hidden"  # control: it hid from its own account
        else:                    # the run's own /proc (its pid namespace) has no hidepid
            assert started == "1" and seen == "visible"
        assert _survivors(tag) == []
    finally:
        _cleanup(tag)

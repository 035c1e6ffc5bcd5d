"""The broker receives the agent's notifications itself (mediation/broker.py,
inflight.py; docs/security-model.md, "Who receives the agent's calls"), and
the attacks on that split: the broker killed while it holds calls the
supervisor never saw, a signal interrupting calls while the broker works
(ID_VALID: no file lands in a call that is gone), and calls in flight when
the agent exits.

Each has its control: the same run on the path before the change
(CONFINE_TEST_TWO_HOPS=1), the same calls before the kill, or the same
script outside confine.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time

from conftest import PY, probe_code

# The agent says it is ready, waits for "go", makes N mediated calls, says
# "done" and waits for "end": the test reads the supervisor's CPU time at "go"
# and at "done".
SUPERVISOR_IDLE = r'''
import time
def wait(name):
    while not os.path.exists(name):
        time.sleep(0.005)
os.mkdir("d")
opened("ready", os.O_WRONLY | os.O_CREAT)
wait("go")
for i in range(P["n"]):
    # new names only: a file there before is handed to undo's keeper first
    opened("f%d" % i, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        os.mkdir("d")
    except FileExistsError:
        pass
opened("done", os.O_WRONLY | os.O_CREAT)
wait("end")
R["ok"] = True
'''


def _cpu_ticks(pid: int) -> int:
    """utime + stime of every thread of `pid` (not its children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _wait_for(path: str, p: subprocess.Popen, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < end, f"no {path}"
        time.sleep(0.005)


def _supervisor_cpu(sb, n: int, env_extra=()) -> int:
    """Clock ticks the supervisor (the `confine exec` process) spent while the
    agent made n creates of new names and n mkdirs of an existing directory."""
    wd = sb.workdir
    p = sb.popen([PY, "-c", probe_code(SUPERVISOR_IDLE, {"n": n})], env_extra=env_extra,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(os.path.join(wd, "ready"), p)
        before = _cpu_ticks(p.pid)
        open(os.path.join(wd, "go"), "w").close()
        _wait_for(os.path.join(wd, "done"), p)
        used = _cpu_ticks(p.pid) - before
        open(os.path.join(wd, "end"), "w").close()
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and '"ok": true' in out, (out, err)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    for name in ("ready", "go", "done", "end", *(f"f{i}" for i in range(n))):
        os.unlink(os.path.join(wd, name))
    os.rmdir(os.path.join(wd, "d"))
    return used


def test_file_calls_no_longer_pass_through_the_supervisor(root_sandbox):
    """One hop fewer: a file call is received, judged and answered by the
    broker, so the supervisor spends (nearly) nothing per call. Control: the
    same run with the supervisor receiving (the path before the change), where
    it copies paths and ids for every call."""
    n = 800
    two_hops = _supervisor_cpu(root_sandbox, n, ["CONFINE_TEST_TWO_HOPS=1"])
    one_hop = _supervisor_cpu(root_sandbox, n)
    assert two_hops >= 5, two_hops         # the measure sees the supervisor's work
    assert one_hop * 4 < two_hops, (one_hop, two_hops)


# The broker: the agent's pid namespace's other child of its pid 1.
FIND_BROKER = r'''
import signal, threading, time
me = os.getpid()
broker = None
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) not in (1, me):
        try:
            if open("/proc/%s/status" % pid).read().find("Tgid:\t%s\n" % pid) >= 0 and \
                    int(open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[1]) == 1:
                broker = int(pid)
        except OSError:
            pass
R["found"] = broker is not None
'''

KILL_WHILE_HELD = FIND_BROKER + r'''
attempt("before", lambda: opened("b0", os.O_WRONLY | os.O_CREAT))
results = {}
started = threading.Barrier(P["threads"] + 1)
def hammer(t):
    got = results.setdefault(t, {})
    started.wait()
    key = "x%d" % t
    for i in range(100000):
        attempt(key, lambda: opened("t%d-%d" % (t, i % 50), os.O_WRONLY | os.O_CREAT))
        v = R.pop(key)
        got[v] = got.get(v, 0) + 1
        if v != "ok":
            return
ts = [threading.Thread(target=hammer, args=(t,), daemon=True) for t in range(P["threads"])]
[t.start() for t in ts]
started.wait()
time.sleep(0.3)
if broker:
    os.kill(broker, signal.SIGKILL)
for t in ts:
    t.join(20)
R["all ended"] = not any(t.is_alive() for t in ts)
R["outcomes"] = sorted({k for r in results.values() for k in r})
R["ok before the kill"] = all(r.get("ok", 0) > 0 for r in results.values())
attempt("after", lambda: opened("a", os.O_WRONLY | os.O_CREAT))
attempt("envrc after", lambda: opened(".envrc", os.O_WRONLY | os.O_CREAT))
'''


def test_a_broker_killed_holding_calls_fails_them_all(user_sandbox):
    """The broker dies while agent threads wait on calls it received itself
    (the supervisor never saw them): each of those calls fails (EIO), none
    waits forever, none proceeds unjudged, and every later call fails too.
    Control: the same threads' calls succeeded before the kill."""
    p, r = user_sandbox.probe(KILL_WHILE_HELD, {"threads": 6}, timeout=90)
    assert r is not None, p.stderr
    assert r["found"] is True and r["before"] == "ok", (r, p.stderr)
    assert r["ok before the kill"] is True, r
    assert r["all ended"] is True, (r, p.stderr)
    assert set(r["outcomes"]) <= {"ok", "EIO"} and "EIO" in r["outcomes"], r
    assert r["after"] == "EIO" and r["envrc after"] == "EIO", r
    assert not os.path.exists(os.path.join(user_sandbox.workdir, ".envrc"))
    assert not os.path.exists(os.path.join(user_sandbox.workdir, "a"))
    assert "broker is gone" in p.stderr, p.stderr


KILL_DURING_KEEP = FIND_BROKER + r'''
tid = []
def trunc():
    tid.append(threading.get_native_id())
    attempt("trunc big", lambda: opened("big", os.O_WRONLY | os.O_TRUNC))
t = threading.Thread(target=trunc, daemon=True)
t.start()
while not tid:
    time.sleep(0.001)
# the thread waits in its open: the broker received it and waits for undo's
# keeper to copy the file before it may truncate it
for _ in range(2000):
    try:
        if open("/proc/self/task/%d/syscall" % tid[0]).read().split()[0] in ("2", "257"):
            break
    except OSError:
        pass
    time.sleep(0.001)
time.sleep(0.01)
if broker:
    os.kill(broker, signal.SIGKILL)
t.join(20)
R["answered"] = not t.is_alive()
R["size"] = os.stat("big").st_size
'''


def test_a_broker_killed_while_undo_keeps_a_file_fails_that_call(root_sandbox):
    """The broker holds a call it received itself (an O_TRUNC of a file there
    at the start waits for undo's keeper to copy it) and is killed: the call
    fails (EIO) instead of waiting forever, and the file is not truncated.
    Control: the file is as big as made."""
    size = 96 << 20
    big = os.path.join(root_sandbox.workdir, "big")
    with open(big, "wb") as f:
        f.truncate(size)
        f.write(b"x")
    os.chown(big, root_sandbox.agent.pw_uid, root_sandbox.agent.pw_gid)
    p, r = root_sandbox.probe(KILL_DURING_KEEP, timeout=60)
    assert r is not None, p.stderr
    assert r["found"] is True, (r, p.stderr)
    assert r["answered"] is True and r["trunc big"] == "EIO", (r, p.stderr)
    assert r["size"] == size and os.path.getsize(big) == size, r


INTERRUPTED = r'''
import signal, threading
signal.signal(signal.SIGUSR1, lambda *a: None)
def fds():
    return len(os.listdir("/proc/self/fd"))
stop = threading.Event()
target = []
def maker():
    target.append(threading.get_ident())
    n = 0
    for i in range(P["n"]):
        fd = os.open("m%d" % (i % 20), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        n += 1
    R["made"] = n
    stop.set()
start = fds()
t = threading.Thread(target=maker)
t.start()
while not target:
    pass
kicks = 0
while not stop.is_set():
    try:
        signal.pthread_kill(target[0], signal.SIGUSR1)
        kicks += 1
    except ProcessLookupError:
        break
t.join()
R["kicks"] = kicks > 100
R["leaked"] = fds() - start
'''


def test_signals_during_calls_leave_no_descriptor_behind(user_sandbox):
    """A signal interrupts the agent's call while the broker performs it: the
    file the broker opened must never land in the agent after the call is
    gone (ADDFD after ID_VALID fails, the broker closes it), and the call,
    restarted, succeeds. Control: the same script outside confine."""
    params = {"n": 300}
    c, cr = user_sandbox.outside_probe(INTERRUPTED, params, timeout=60)
    assert cr == {"made": 300, "kicks": True, "leaked": 0}, (cr, c.stderr)
    p, r = user_sandbox.probe(INTERRUPTED, params, timeout=90)
    assert r == {"made": 300, "kicks": True, "leaked": 0}, (r, p.stderr)


EXIT_IN_FLIGHT = r'''
import threading, time
def busy(t):
    i = 0
    while True:
        try:
            os.mkdir("x%d-%d" % (t, i % 10))
        except OSError:
            pass
        try:
            os.rmdir("x%d-%d" % (t, i % 10))
        except OSError:
            pass
        i += 1
for t in range(6):
    threading.Thread(target=busy, args=(t,), daemon=True).start()
time.sleep(0.3)
os._exit(7)
'''


def test_an_exit_with_calls_in_flight_ends_the_run(root_sandbox):
    """The agent exits while its threads wait on calls the broker holds: the
    run ends with the agent's status, promptly. Control: the same outside."""
    c = root_sandbox.outside([PY, "-c", probe_code(EXIT_IN_FLIGHT)], timeout=30)
    assert c.returncode == 7, c.stderr
    t = time.monotonic()
    p = root_sandbox.run([PY, "-c", probe_code(EXIT_IN_FLIGHT)], timeout=30)
    assert p.returncode == 7, p.stderr
    assert time.monotonic() - t < 15
    assert "broker is gone" not in p.stderr, p.stderr


CANNOT_WAIT = FIND_BROKER + r'''
import errno, socket
def switches():
    """Each broker thread's voluntary context switches: a thread woken counts."""
    out = {}
    for t in os.listdir("/proc/%d/task" % broker):
        for line in open("/proc/%d/task/%s/status" % (broker, t)):
            if line.startswith("voluntary_ctxt_switches:"):
                out[t] = int(line.split()[1])
    return out
def woken(before):
    after = switches()
    return sum(1 for t, v in after.items() if before.get(t) != v)
def conn(path, kind=socket.SOCK_STREAM, blocking=False):
    s = socket.socket(socket.AF_UNIX, kind)
    s.setblocking(blocking)
    try:
        s.connect(path)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, e.errno)
    finally:
        s.close()
srv = socket.socket(socket.AF_UNIX); srv.bind("in.sock"); srv.listen(128)
dg = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); dg.bind("in.dgram")
before = switches()
R["inside"] = sorted({conn("in.sock") for _ in range(20)}
                     | {conn("in.dgram", socket.SOCK_DGRAM, True) for _ in range(20)})
R["threads woken"] = woken(before)
R["outside"] = conn(P["out"])
R["outside dgram"] = conn(P["out_dgram"], socket.SOCK_DGRAM, True)
# the control: a blocking stream connect (it may wait) is handed to another thread
before = switches()
R["blocking inside"] = sorted({conn("in.sock", blocking=True) for _ in range(5)})
R["threads woken by blocking connects"] = woken(before)
'''


def test_socket_calls_that_cannot_wait_are_performed_where_received(sandbox):
    """A non-blocking unix connect, and a datagram socket's connect, are judged
    and performed by the broker's receiving thread (no other thread woken: the
    hand-over was most of the unix connect's cost after the one-hop change),
    and judged there as anywhere: the socket outside the workdir is refused and
    its listener sees nothing. Controls: the same connect unconfined reaches
    it; blocking stream connects (which may wait) are handed to another
    thread, and the count of broker threads woken does see that."""
    from test_unix_sockets import Listener
    out, out_dgram = Listener(), Listener(socket.SOCK_DGRAM)
    try:
        ctl = sandbox.outside([PY, "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); "
                               "s.setblocking(False); s.connect(sys.argv[1]); print('ok')",
                               out.path])
        assert ctl.returncode == 0, ctl.stderr
        time.sleep(0.3)
        before = out.hits
        assert before >= 1
        p, r = sandbox.probe(CANNOT_WAIT, {"out": out.path, "out_dgram": out_dgram.path})
        assert r is not None and r["found"] is True, p.stderr
        assert r["inside"] == ["ok"], r
        assert r["outside"] == "EACCES" and r["outside dgram"] == "EACCES", r
        # 0 when each next call was already there as the last was answered
        assert r["threads woken"] <= 1, r
        assert r["blocking inside"] == ["ok"] and r["threads woken by blocking connects"] >= 2, r
        time.sleep(0.3)
        assert out.hits == before, "the forbidden listener accepted a connection"
        assert "denied: connect to unix socket" in p.stderr, p.stderr
    finally:
        out.close()
        out_dgram.close()


NONBLOCKING_CONNECTS = """
import socket, json, sys
res = []
for p in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_UNIX)
    s.setblocking(False)
    try:
        s.connect(p); res.append("C")
    except OSError as e:
        res.append(e.errno)
    finally:
        s.close()
print(json.dumps(res))
"""


def test_a_connect_the_person_is_asked_about_is_asked_from_any_thread(sandbox):
    """A non-blocking connect the receiving thread would perform, but which
    approvals.unix_sockets puts to the person: the verdict comes to the
    receiving thread, so it is handed on (Deferred), asked, and the answer
    holds: allowed once, then denied with the reason. Control: the same
    socket reachable unconfined."""
    import errno
    import json
    import tempfile

    from test_approvals import ASK_PROFILE, Decider
    from test_unix_sockets import Listener
    a = Listener()
    d = Decider(["once", "deny"])
    prof = tempfile.NamedTemporaryFile("w", suffix=".yaml", dir="/tmp", delete=False)
    try:
        prof.write(ASK_PROFILE)
        prof.close()
        os.chmod(prof.name, 0o644)
        ctl = sandbox.outside([PY, "-c", NONBLOCKING_CONNECTS, json.dumps([a.path])])
        assert json.loads(ctl.stdout.splitlines()[-1]) == ["C"], ctl.stderr
        p = sandbox.run([PY, "-c", NONBLOCKING_CONNECTS, json.dumps([a.path, a.path])],
                        "-p", prof.name, "--approver-socket", d.path, timeout=60)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("[")]
        assert p.returncode == 0 and lines, p.stderr
        assert json.loads(lines[-1]) == ["C", errno.EACCES], p.stderr
        assert [q["subject"]["path"] for q in d.questions] == [a.path, a.path]
        assert "scripted deny" in p.stderr
    finally:
        d.close()
        a.close()
        os.unlink(prof.name)

"""Mediated file calls made at the same time by several agent threads and
processes, the broker answering calls itself, the EEXIST fast path of mkdir,
and a broker that dies with a call in flight (mediation/broker.py, files.py,
supervisor.py).

Each refusal has a control beside it: the same call on an ordinary name in
the same loop, which must work, and the same script run outside confine,
where the protected names are made (so the refusals are confine's).
"""
from __future__ import annotations

import os

PROTECTED = (".envrc", ".mcp.json", ".bashrc")

# P: {"procs", "threads", "rounds"}. Every thread of every process makes an
# ordinary file per round, and tries to give it each protected name (rename,
# hard link, symlink); one thread per process renames the directory `sub`
# back and forth while the others make names in it.
PARALLEL_BODY = r'''
import json, threading
os.makedirs("sub", exist_ok=True)
os.makedirs("keep", exist_ok=True)
PROT = [".envrc", ".mcp.json", ".bashrc"]

def worker(tag, out):
    for i in range(P["rounds"]):
        n = "f-%s-%d" % (tag, i)
        k = {}
        attempt("create", lambda: opened(n, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        k["create"] = R.pop("create")
        for p in PROT:
            attempt("x", lambda: os.rename(n, p)); k["rename " + p] = R.pop("x")
            attempt("x", lambda: os.link(n, p)); k["link " + p] = R.pop("x")
            attempt("x", lambda: os.symlink(n, "sub/" + p)); k["symlink sub/" + p] = R.pop("x")
        attempt("x", lambda: opened("sub/o-%s-%d" % (tag, i), os.O_WRONLY | os.O_CREAT))
        k["ordinary in sub"] = R.pop("x")
        attempt("x", lambda: os.mkdir("keep")); k["mkdir existing"] = R.pop("x")
        for key, v in k.items():
            out.setdefault(key, {}).setdefault(v, 0)
            out[key][v] += 1

def mover(stop, out):
    while not stop.is_set():
        for a, b in (("sub", "sub2"), ("sub2", "sub")):
            attempt("x", lambda: os.rename(a, b))
            v = R.pop("x")
            out.setdefault("move sub", {}).setdefault(v, 0)
            out["move sub"][v] += 1

def one_process(ptag):
    out = {}
    stop = threading.Event()
    ts = [threading.Thread(target=worker, args=("%s%d" % (ptag, t), out))
          for t in range(P["threads"])]
    m = threading.Thread(target=mover, args=(stop, out))
    for t in ts:
        t.start()
    m.start()
    for t in ts:
        t.join()
    stop.set()
    m.join()
    return out

pipes, kids = [], []
for pn in range(P["procs"]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, json.dumps(one_process("p%d" % pn)).encode())
        os._exit(0)
    os.close(w)
    pipes.append(r)
    kids.append(pid)
total = {}
for r in pipes:
    data = b""
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        data += b
    for key, vals in json.loads(data or b"{}").items():
        for v, c in vals.items():
            total.setdefault(key, {}).setdefault(v, 0)
            total[key][v] += c
for pid in kids:
    os.waitpid(pid, 0)
R["total"] = total
'''


def _protected_in(workdir: str) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(workdir):
        for n in filenames + dirnames:
            if n in PROTECTED:
                found.append(os.path.relpath(os.path.join(dirpath, n), workdir))
    return found


def test_parallel_calls_are_all_judged(sandbox):
    procs, threads, rounds = 2, 4, 12
    params = {"procs": procs, "threads": threads, "rounds": rounds}
    calls = procs * threads * rounds
    # control: outside confine the same script makes the protected names
    c, cr = sandbox.outside_probe(PARALLEL_BODY, params, timeout=120)
    assert cr is not None, c.stderr
    assert cr["total"]["rename .envrc"].get("ok", 0) > 0, cr
    assert _protected_in(sandbox.workdir), "the control made no protected name"
    for n in os.listdir(sandbox.workdir):
        p = os.path.join(sandbox.workdir, n)
        if os.path.isdir(p) and not os.path.islink(p):
            import shutil
            shutil.rmtree(p)
        else:
            os.unlink(p)

    p, r = sandbox.probe(PARALLEL_BODY, params, timeout=300)
    assert r is not None, p.stderr
    t = r["total"]
    assert t["create"] == {"ok": calls}, t
    assert t["mkdir existing"] == {"EEXIST": calls}, t
    for name in PROTECTED:
        assert t["rename " + name] == {"EACCES": calls}, (name, t)
        assert t["link " + name] == {"EACCES": calls}, (name, t)
        # sub may be moved away by the other thread at that moment: ENOENT
        assert set(t["symlink sub/" + name]) <= {"EACCES", "ENOENT"}, (name, t)
        assert t["symlink sub/" + name].get("EACCES", 0) > 0, (name, t)
    assert set(t["ordinary in sub"]) <= {"ok", "ENOENT"} and t["ordinary in sub"].get("ok"), t
    assert set(t["move sub"]) <= {"ok", "ENOENT"} and t["move sub"].get("ok"), t
    assert _protected_in(sandbox.workdir) == []
    assert "PROTECTED PATHS WERE CHANGED" not in p.stderr, p.stderr


EEXIST_BODY = r'''
os.makedirs("d", exist_ok=True)
opened("file", os.O_WRONLY | os.O_CREAT)
os.symlink("nowhere", "dangling")
for name in ("d", "d/", "file", "dangling", ".git", ".git/hooks", ".vscode", "."):
    attempt("existing " + name, lambda n=name: os.mkdir(n))
attempt("new plain", lambda: os.mkdir("plain"))
attempt("new .claude/commands", lambda: os.mkdir(".claude/commands"))
attempt("again .claude/commands", lambda: os.mkdir(".claude/commands"))
attempt("below held", lambda: os.mkdir(".claude/commands/x"))
attempt("below held again", lambda: os.mkdir(".claude/commands/x"))
R["plain is dir"] = os.path.isdir("plain")
R["hooks"] = sorted(os.listdir(".git/hooks"))
R["vscode"] = sorted(os.listdir(".vscode"))
'''


def test_mkdir_of_an_existing_name_is_eexist_and_changes_nothing(sandbox):
    wd = sandbox.workdir
    # protected directories that exist at start (bound read-only for the run)
    os.makedirs(os.path.join(wd, ".git/hooks"))
    os.makedirs(os.path.join(wd, ".vscode"))
    os.makedirs(os.path.join(wd, ".claude"))
    for d in (".git", ".git/hooks", ".vscode", ".claude"):
        os.chown(os.path.join(wd, d), sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    # control: what the kernel answers outside
    c, cr = sandbox.outside_probe("os.makedirs('d', exist_ok=True)\n"
                                  "attempt('existing d', lambda: os.mkdir('d'))\n"
                                  "os.symlink('nowhere', 'dangling0')\n"
                                  "attempt('dangling', lambda: os.mkdir('dangling0'))\n")
    assert cr == {"existing d": "EEXIST", "dangling": "EEXIST"}, (cr, c.stderr)
    os.rmdir(os.path.join(wd, "d"))
    os.unlink(os.path.join(wd, "dangling0"))

    p, r = sandbox.probe(EEXIST_BODY)
    assert r is not None, p.stderr
    for name in ("d", "d/", "file", "dangling", ".git", ".git/hooks", ".vscode", "."):
        assert r["existing " + name] == "EEXIST", (name, r, p.stderr)
    assert r["new plain"] == "ok" and r["plain is dir"] is True, r
    # a new protected directory is held (made outside the workdir); made again
    # it still succeeds, as does a directory below it: the held area's names
    # are not the workdir's, so the fast path must not answer EEXIST there
    assert r["new .claude/commands"] == "ok", (r, p.stderr)
    assert r["again .claude/commands"] == "ok", (r, p.stderr)
    assert r["below held"] == "ok" and r["below held again"] == "ok", (r, p.stderr)
    assert r["hooks"] == [] and r["vscode"] == [], r
    assert not os.path.exists(os.path.join(wd, ".claude/commands"))
    assert "denied" not in p.stderr, p.stderr


KILL_MID_CALL_BODY = r'''
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
def many(tag):
    # more calls than the supervisor keeps before it forgets the answered ones
    for i in range(300):
        attempt(tag, lambda: (opened("m", os.O_WRONLY | os.O_CREAT | os.O_EXCL), os.unlink("m"))[-1])
        if R[tag] != "ok":
            return
many("before")
os.mkfifo("fifo")
def blocked():
    attempt("fifo open", lambda: opened("fifo", os.O_WRONLY))
t = threading.Thread(target=blocked)
t.start()
time.sleep(0.5)
# the broker is performing the FIFO open (it waits for a reader); other
# calls are still answered meanwhile, and the waiting one is not forgotten
attempt("while blocked", lambda: opened("a", os.O_WRONLY | os.O_CREAT))
many("many while blocked")
R["still waiting"] = t.is_alive()
if broker:
    os.kill(broker, signal.SIGKILL)
t.join(10)
R["answered"] = not t.is_alive()
attempt("after", lambda: opened("b", os.O_WRONLY | os.O_CREAT))
attempt("envrc after", lambda: opened(".envrc", os.O_WRONLY | os.O_CREAT))
'''


def test_a_broker_killed_mid_call_fails_the_call(root_sandbox):
    """The broker dies while it performs a call (a FIFO open, on a worker):
    that call gets EIO, never success, and so does every later one."""
    p, r = root_sandbox.probe(KILL_MID_CALL_BODY, timeout=60)
    assert r is not None, p.stderr
    assert r["found"] is True, (r, p.stderr)
    assert r["before"] == r["many while blocked"] == "ok", (r, p.stderr)
    assert r["while blocked"] == "ok" and r["still waiting"] is True, (r, p.stderr)
    assert r["answered"] is True and r["fifo open"] == "EIO", (r, p.stderr)
    assert r["after"] == "EIO" and r["envrc after"] == "EIO", r
    assert "broker is gone" in p.stderr
    assert not os.path.exists(os.path.join(root_sandbox.workdir, ".envrc"))
    assert not os.path.exists(os.path.join(root_sandbox.workdir, "b"))


API_RUNS = r'''
import json, os, sys, time
import confine
WD = sys.argv[1]
def listeners():
    n = 0
    for f in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink("/proc/self/fd/" + f) == "anon_inode:seccomp notify"
        except OSError:
            pass
    return n
code = ("import threading\n"
        "def f(i):\n"
        "    for j in range(20): open('x%d_%d' % (i, j), 'w').close()\n"
        "ts = [threading.Thread(target=f, args=(i,)) for i in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n")
st = []
for _ in range(4):
    st.append(confine.run(["/usr/bin/python3", "-c", code], workdir=WD))
    for _ in range(50):            # the mediator's thread ends just after the run
        if listeners() == 0:
            break
        time.sleep(0.05)
print(json.dumps({"status": st, "listeners": listeners(), "fds": len(os.listdir("/proc/self/fd"))}))
'''


def test_runs_from_the_api_leave_no_listener_behind(sandbox):
    """A launcher running many sandboxes in one process (the Python API) keeps
    neither the runs' seccomp listeners nor the mediator's per-thread
    descriptors (8 agent threads each run)."""
    import subprocess

    from conftest import PREFIX
    argv = sandbox.cmd([])[:-1] + [os.path.join(PREFIX, "bin", "python"), "-c", API_RUNS,
                                   sandbox.workdir]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=sandbox.workdir)
    assert p.returncode == 0, p.stderr
    import json
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["status"] == [0, 0, 0, 0], (r, p.stderr)
    assert os.path.isfile(os.path.join(sandbox.workdir, "x7_19"))      # the calls were made
    assert r["listeners"] == 0, r


CONNECT_KILL_BODY = r'''
import signal, socket, threading, time
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
srv = socket.socket(socket.AF_UNIX)
srv.bind("s.sock")
srv.listen(0)
other = socket.socket(socket.AF_UNIX)
other.bind("o.sock")
other.listen(64)
# more connects than the supervisor keeps before it forgets those the broker
# answered itself, each accepted
for i in range(150):
    c = socket.socket(socket.AF_UNIX)
    attempt("before", lambda: c.connect("s.sock"))
    if R["before"] != "ok":
        break
    srv.accept()[0].close()
    c.close()
# fill the backlog (non-blocking: EAGAIN once it is full), then a blocking
# connect waits in the broker for an accept that never comes
held = []
for i in range(8):
    c = socket.socket(socket.AF_UNIX)
    c.setblocking(False)
    attempt("fill", lambda: c.connect("s.sock"))
    held.append(c)
    if R["fill"] == "EAGAIN":
        break
def blocked():
    s = socket.socket(socket.AF_UNIX)
    attempt("blocked connect", lambda: s.connect("s.sock"))
t = threading.Thread(target=blocked)
t.start()
time.sleep(0.5)
c = socket.socket(socket.AF_UNIX)
attempt("while blocked", lambda: c.connect("o.sock"))
R["still waiting"] = t.is_alive()
if broker:
    os.kill(broker, signal.SIGKILL)
t.join(10)
R["answered"] = not t.is_alive()
c = socket.socket(socket.AF_UNIX)
attempt("after", lambda: c.connect("o.sock"))
'''


def test_a_broker_killed_mid_connect_refuses_the_connect(root_sandbox):
    """Unix connects are answered by the broker itself (one hop fewer): the
    supervisor still remembers each one the broker has not answered, so a
    broker that dies while a connect waits in it (a full backlog) leaves that
    connect ECONNREFUSED, never success, and every later one too. Controls:
    150 connects before (more than the supervisor keeps of those answered
    directly), another listener reachable while the first connect waits
    (refusals through this path: test_unix_sockets.py, root and user)."""
    p, r = root_sandbox.probe(CONNECT_KILL_BODY, timeout=60)
    assert r is not None, p.stderr
    assert r["found"] is True, (r, p.stderr)
    assert r["before"] == "ok" and r["while blocked"] == "ok", (r, p.stderr)
    assert r["fill"] == "EAGAIN" and r["still waiting"] is True, (r, p.stderr)
    assert r["answered"] is True and r["blocked connect"] == "ECONNREFUSED", (r, p.stderr)
    assert r["after"] == "ECONNREFUSED", r
    assert "broker is gone" in p.stderr

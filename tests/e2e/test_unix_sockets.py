"""Pathname unix sockets outside the workdir are unreachable (issue 3, item 1).

A real listener outside the workdir, reachable by file permissions (mode 0777),
counts the connections it accepts: the positive control proves the same
connect works unconfined; inside, every route to it must fail and the listener
must see nothing.
"""
from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest
from conftest import PY


class Listener:
    def __init__(self, kind=socket.SOCK_STREAM):
        self.dir = tempfile.mkdtemp(prefix="confine-sock-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.path = os.path.join(self.dir, "docker.sock")
        self.sock = socket.socket(socket.AF_UNIX, kind)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)
        self.kind = kind
        self.hits = 0
        self.stop = False
        if kind == socket.SOCK_STREAM:
            self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        while not self.stop:
            try:
                if self.kind == socket.SOCK_STREAM:
                    c, _ = self.sock.accept()
                    try:
                        self._reply(c)
                    except OSError:
                        pass
                    c.close()
                else:
                    self.sock.recv(65536)
                self.hits += 1
            except (socket.timeout, OSError):
                continue

    @staticmethod
    def _reply(c):
        """Read the request (if one comes) before answering: a reply to a client
        whose request is still unread is answered with a reset when we close,
        and curl then reports failure (exit 7 or 56) although it got the reply."""
        c.settimeout(0.5)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
        except socket.timeout:
            pass
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
        c.shutdown(socket.SHUT_WR)
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass

    def close(self):
        self.stop = True
        self.t.join(2)
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def listener():
    l = Listener()
    yield l
    l.close()


@pytest.fixture
def dgram_listener():
    l = Listener(socket.SOCK_DGRAM)
    yield l
    l.close()


CONNECT = r"""
import socket, os, json, sys
target = sys.argv[1]
res = {}
def tryc(p):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p); return "CONNECTED"
    except OSError as e:
        return e.errno
    finally:
        s.close()
res["direct"] = tryc(target)
os.symlink(target, "link.sock")
res["symlink"] = tryc("link.sock")
res["symlink_abs"] = tryc(os.path.abspath("link.sock"))
os.symlink(os.path.dirname(target), "linkdir")
res["symlink_dir"] = tryc("linkdir/" + os.path.basename(target))
res["proc_root"] = tryc("/proc/self/root" + target)
res["proc_cwd_dotdot"] = tryc("/proc/self/cwd/../.." + target)
res["relative"] = tryc(os.path.relpath(target))
srv = socket.socket(socket.AF_UNIX); srv.bind("in.sock"); srv.listen()
res["inside"] = tryc("in.sock")
res["inside_abs"] = tryc(os.path.abspath("in.sock"))
print(json.dumps(res))
"""


def test_outside_socket_unreachable_every_route(sandbox, listener):
    ctl = sandbox.outside([PY, "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); "
                           "s.connect(sys.argv[1]); print('ok')", listener.path])
    assert ctl.returncode == 0, ctl.stderr          # the control: reachable unconfined
    time.sleep(0.3)
    before = listener.hits
    assert before >= 1
    p, data = sandbox.py(CONNECT.replace("sys.argv[1]", repr(listener.path)))
    assert p.returncode == 0, p.stderr
    import errno
    for route in ("direct", "symlink", "symlink_abs", "symlink_dir", "proc_root",
                  "proc_cwd_dotdot", "relative"):
        assert data[route] == errno.EACCES, (route, data)
    assert data["inside"] == "CONNECTED" and data["inside_abs"] == "CONNECTED", data
    time.sleep(0.3)
    assert listener.hits == before, "the forbidden listener accepted a connection"
    assert "denied: connect to unix socket" in p.stderr


def test_profile_allow_makes_it_reachable(sandbox, listener, tmp_path_factory):
    prof = tempfile.NamedTemporaryFile("w", suffix=".yaml", dir="/tmp", delete=False)
    prof.write(f"extends: default\nunix_sockets:\n  allow: [{listener.path}]\n")
    prof.close()
    os.chmod(prof.name, 0o644)
    try:
        p, data = sandbox.py(
            "import socket,json; s=socket.socket(socket.AF_UNIX); "
            f"s.connect({listener.path!r}); print(json.dumps({{'ok': s.recv(100).decode()}}))",
            "-p", prof.name)
        assert p.returncode == 0, p.stderr
        assert "ok" in data["ok"]
    finally:
        os.unlink(prof.name)


def test_dgram_sendto_outside_denied_inside_works(sandbox, dgram_listener):
    code = f"""
import socket, json, errno
res = {{}}
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    d.sendto(b"x", {dgram_listener.path!r}); res["outside"] = "SENT"
except OSError as e:
    res["outside"] = e.errno
r = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); r.bind("in.dgram")
d.sendto(b"hello", "in.dgram")
res["inside"] = r.recv(10).decode()
# sendmsg with an address and a passed descriptor
a, b = socket.socketpair()
d.sendmsg([b"fd"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, __import__("array").array("i", [a.fileno()]))], 0, "in.dgram")
msg, anc, _, _ = r.recvmsg(10, socket.CMSG_SPACE(4))
res["sendmsg"] = msg.decode(); res["fds"] = len(anc)
# the same to an absolute address (no cwd travels to the broker): the very socket passed
import os, array
d.sendmsg([b"abs"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno()]))], 0,
          os.path.abspath("in.dgram"))
msg, anc, _, _ = r.recvmsg(10, socket.CMSG_SPACE(4))
got = socket.socket(fileno=array.array("i", anc[0][2])[0])
b.send(b"via"); res["abs"] = [msg.decode(), got.recv(10).decode()]
try:
    d.sendmsg([b"x"], [], 0, {dgram_listener.path!r}); res["sendmsg_outside"] = "SENT"
except OSError as e:
    res["sendmsg_outside"] = e.errno
print(json.dumps(res))
"""
    p, data = sandbox.py(code)
    assert p.returncode == 0, p.stderr
    assert data["outside"] == 13 and data["sendmsg_outside"] == 13, data
    assert data["inside"] == "hello" and data["sendmsg"] == "fd" and data["fds"] == 1, data
    assert data["abs"] == ["abs", "via"], data
    time.sleep(0.3)
    assert dgram_listener.hits == 0


RACE = r"""
import ctypes, socket, threading, json, os, struct, time
libc = ctypes.CDLL(None, use_errno=True)
good = os.path.abspath("in.sock").encode()
bad = BAD.encode()
srv = socket.socket(socket.AF_UNIX); srv.bind(good); srv.listen(1024)
def acc():
    while True:
        c, _ = srv.accept(); c.close()
threading.Thread(target=acc, daemon=True).start()
def addr(p):
    return struct.pack("<H", socket.AF_UNIX) + p + b"\0" * (108 - len(p))
buf = ctypes.create_string_buffer(addr(good), 110)
stop = False
def flip():
    a, b = addr(good), addr(bad)
    while not stop:
        ctypes.memmove(buf, b, 110); ctypes.memmove(buf, a, 110)
t = threading.Thread(target=flip); t.start()
ok = denied = other = 0
end = time.time() + 3
while time.time() < end:
    s = socket.socket(socket.AF_UNIX)
    r = libc.connect(s.fileno(), buf, 110)
    if r == 0: ok += 1
    elif ctypes.get_errno() == 13: denied += 1
    else: other += 1
    s.close()
stop = True; t.join()
print(json.dumps({"ok": ok, "denied": denied, "other": other}))
"""


def test_address_flip_race_never_reaches_forbidden(sandbox, listener):
    p, data = sandbox.py(RACE.replace("BAD", repr(listener.path)), timeout=60)
    assert p.returncode == 0, p.stderr
    assert data["ok"] + data["denied"] > 50, data
    time.sleep(0.3)
    assert listener.hits == 0, f"race won: forbidden listener accepted {listener.hits}"


FD_SWAP = r"""
import ctypes, socket, threading, json, os, struct, time
libc = ctypes.CDLL(None, use_errno=True)
bad = BAD.encode()
a = struct.pack("<H", socket.AF_UNIX) + bad + b"\0"
# fd N alternates between a TCP socket and a unix socket while connect(N, unix addr) runs
tcp = socket.socket(); uni = socket.socket(socket.AF_UNIX)
N = 100
stop = False
def swap():
    while not stop:
        os.dup2(tcp.fileno(), N); os.dup2(uni.fileno(), N)
os.dup2(uni.fileno(), N)
t = threading.Thread(target=swap); t.start()
n = 0
end = time.time() + 2
while time.time() < end:
    libc.connect(N, a, len(a)); n += 1
    uni.close(); uni = socket.socket(socket.AF_UNIX)
stop = True; t.join()
print(json.dumps({"tries": n}))
"""


def test_fd_swap_race_never_reaches_forbidden(sandbox, listener):
    p, data = sandbox.py(FD_SWAP.replace("BAD", repr(listener.path)), timeout=60)
    assert p.returncode == 0, p.stderr
    assert data["tries"] > 20
    time.sleep(0.3)
    assert listener.hits == 0


def test_curl_unix_socket_fails(sandbox, listener):
    if not shutil.which("curl"):
        pytest.skip("curl not installed (scripts/test-deps.sh installs it)")
    ctl = sandbox.outside(["curl", "-s", "--unix-socket", listener.path, "http://x/version"])
    assert ctl.returncode == 0 and ctl.stdout == "ok", ctl
    p = sandbox.run(["curl", "-sS", "--unix-socket", listener.path, "http://x/version"])
    assert p.returncode != 0
    assert "ok" not in p.stdout


def test_ssh_agent_unreachable(sandbox, test_user):
    if not shutil.which("ssh-agent"):
        pytest.skip("openssh-client not installed (scripts/test-deps.sh installs it)")
    d = tempfile.mkdtemp(prefix="confine-agent-", dir="/tmp")
    os.chown(d, test_user.pw_uid, test_user.pw_gid)
    sock = os.path.join(d, "agent.sock")
    agent = subprocess.Popen(sandbox.outside_cmd(["ssh-agent", "-D", "-a", sock]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        ctl = sandbox.outside(["ssh-add", "-l"], env_extra=[f"SSH_AUTH_SOCK={sock}"])
        assert ctl.returncode == 1, ctl   # 1: agent reachable, no identities
        p = sandbox.run(["ssh-add", "-l"], "--env", f"SSH_AUTH_SOCK={sock}")
        assert p.returncode == 2, (p.returncode, p.stderr)   # 2: cannot connect to the agent
    finally:
        agent.kill()
        agent.wait()
        shutil.rmtree(d, ignore_errors=True)


def test_forkserver_and_tmux_work(sandbox):
    code = r"""
import multiprocessing as mp, json
def f(x): return x * 2
if __name__ == "__main__":
    with mp.get_context("forkserver").Pool(2) as p:
        print(json.dumps({"r": p.map(f, [1, 2, 3])}))
"""
    with open(os.path.join(sandbox.workdir, "fs.py"), "w") as fh:
        fh.write(code)
    p = sandbox.run([PY, "fs.py"])
    assert p.returncode == 0, p.stderr
    assert '"r": [2, 4, 6]' in p.stdout
    if shutil.which("tmux"):
        p = sandbox.run(["sh", "-c", "tmux -S ./tmux.sock new-session -d 'sleep 30' && "
                         "tmux -S ./tmux.sock list-sessions && tmux -S ./tmux.sock kill-server"])
        assert p.returncode == 0, p.stderr
        assert "1 windows" in p.stdout


PEERCRED = r"""
import socket, struct, os, json, sys
res = {}
name = "cred%d.sock" % os.getpid()
srv = socket.socket(socket.AF_UNIX); srv.bind(name); srv.listen(4)
c = socket.socket(socket.AF_UNIX); c.connect(name)
pid, uid, gid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
res.update(pid=pid, uid=uid, gid=gid, me=[os.getuid(), os.getgid()], ppid=os.getppid())
try:
    res["status_uid"] = int([l for l in open("/proc/%d/status" % pid) if l.startswith("Uid:")][0].split()[1])
except (OSError, IndexError):
    res["status_uid"] = None
try:
    pfd = struct.unpack("i", c.getsockopt(socket.SOL_SOCKET, 77, 4))[0]      # SO_PEERPIDFD
    res["pidfd_pid"] = int([l for l in open("/proc/self/fdinfo/%d" % pfd) if l.startswith("Pid:")][0].split()[1])
except OSError as e:
    res["pidfd_pid"] = e.errno
print(json.dumps(res))
"""


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_an_agent_listener_carries_the_agents_credentials(sandbox, layers):
    """Issue 10 item 13: listen() performed by the root supervisor gave every
    client of an agent-made server SO_PEERCRED uid 0 (and the supervisor's
    pid, or 0 where the supervisor is outside the agent's pid namespace), and
    SO_PEERPIDFD a pidfd of the supervisor. Now a process of the agent's,
    with its uid and gid."""
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    p, d = box.py(PEERCRED)
    assert p.returncode == 0 and d is not None, p.stderr
    ctl = box.outside([PY, "-c", PEERCRED])          # the control: unconfined, the same server
    c = __import__("json").loads(ctl.stdout)
    assert [c["uid"], c["gid"]] == c["me"] and c["pid"] > 0, c
    assert [d["uid"], d["gid"]] == d["me"] == [box.agent.pw_uid, box.agent.pw_gid], d
    assert d["pid"] > 0 and d["pid"] != d["ppid"], d      # a process the agent can see
    assert d["status_uid"] == box.agent.pw_uid, d         # ... and it is one of its own
    if isinstance(d["pidfd_pid"], int) and d["pidfd_pid"] > 100000:
        pytest.fail(f"unexpected pidfd answer {d}")
    if d["pidfd_pid"] not in (errno.ENOPROTOOPT, errno.EINVAL):
        assert d["pidfd_pid"] == d["pid"], d


HOSTPID = r"""
import socket, os, json
res = {}
wd = os.getcwd()
srv = socket.socket(socket.AF_UNIX); srv.bind("in.sock"); srv.listen(8)
def tryc(p):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p); return "CONNECTED"
    except OSError as e:
        return e.errno
    finally:
        s.close()
res["self"] = tryc("/proc/self/root" + wd + "/in.sock")
res["self cwd"] = tryc("/proc/self/cwd/in.sock")
res["host pid"] = tryc("/proc/%d/root" % HOST + wd + "/in.sock")
res["no pid"] = tryc("/proc/%d/root" % NOPID + wd + "/in.sock")
os.symlink("/proc/%d/root" % HOST, "hostroot")
res["host pid via link"] = tryc("hostroot" + wd + "/in.sock")
res["host cwd"] = tryc("/proc/%d/cwd/in.sock" % HOST)
print(json.dumps(res))
"""


def test_socket_addresses_are_resolved_in_the_agents_view(sandbox, outside_sleeper):
    """Issue 10 item 16: the supervisor resolved /proc/N/... in the host's
    /proc, so a connect through /proc/<host pid>/root reached the workdir's
    socket exactly when host pid N existed: a host pid oracle. The broker
    resolves in the agent's view, where host pids do not exist."""
    nopid = 4194000
    while os.path.exists(f"/proc/{nopid}"):
        nopid -= 1
    code = HOSTPID.replace("HOST", str(outside_sleeper)).replace("NOPID", str(nopid))
    p, d = sandbox.py(code)
    assert p.returncode == 0 and d is not None, p.stderr
    assert d["self"] == "CONNECTED" and d["self cwd"] == "CONNECTED", d   # the agent's own /proc
    assert os.path.exists(f"/proc/{outside_sleeper}/root")               # the host pid is alive
    assert d["host pid"] == d["no pid"] == d["host pid via link"] == errno.ENOENT, d
    assert d["host cwd"] == errno.ENOENT, d

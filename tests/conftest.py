"""Shared fixtures: the installed confine, an unprivileged account, workdirs.

Tests run real confined processes. `as_user` is parametrized: "root" starts
confine as root (the agent then runs as the workdir's owner, the test
account), "user" starts confine as the unprivileged test account itself.

Every "blocked" assertion in the end-to-end suites is paired with a control:
the same attempt made by the same identity *outside* the sandbox
(`Sandbox.outside_probe`), or a positive control inside. `probe()` runs one
Python process that makes many independent attempts and reports a JSON dict
name -> "ok" | errno name | "signal:N" | "exit:N" | other value.
"""
from __future__ import annotations

import copy
import json
import os
import pty
import pwd
import select
import shutil
import signal
import subprocess
import tarfile
import tempfile
import textwrap
import time

import pytest

TEST_USER = "confine-test"
PREFIX = os.environ.get("CONFINE_TEST_PREFIX", "/opt/confine-test")
CONFINE = os.path.join(PREFIX, "bin", "confine")
PY = "/usr/bin/python3"  # the system python: readable inside the default profile
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Test-only knob: confine believes mount/pid namespaces are unavailable and, with
# --degrade mount_namespace, runs with Landlock and seccomp only. Used to prove
# those layers on their own, under the namespace layers of a default run.
NO_NAMESPACES = "CONFINE_TEST_NO_NAMESPACES=1"


def _user():
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        return None


@pytest.fixture(scope="session")
def confine_bin():
    if not os.access(CONFINE, os.X_OK):
        pytest.fail(f"{CONFINE} not installed: run ./test.sh (it installs confine there)")
    return CONFINE


@pytest.fixture(scope="session")
def test_user():
    pw = _user()
    if pw is None:
        pytest.fail(f"account {TEST_USER} missing: run ./test.sh as root (scripts/test-deps.sh)")
    return pw


# --- the probe library ---------------------------------------------------------------
# Prepended to every probe. Runs under /usr/bin/python3 inside and outside the sandbox.
PROBE_LIB = r'''
import ctypes, errno, json, os, signal, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ioctl.restype = ctypes.c_int
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
R = {}

def en(e):
    return errno.errorcode.get(e, str(e))

def _arg(a):
    if a is None:
        return ctypes.c_void_p(None)
    if isinstance(a, int):
        return ctypes.c_long(a)
    if isinstance(a, bytes):
        return ctypes.c_char_p(a)
    return a

def sysc(nr, *args):
    """Raw syscall: "ok" or the errno name."""
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    if r == -1:
        return en(ctypes.get_errno())
    return "ok"

def sysr(nr, *args):
    """Raw syscall: (return value, errno name or None)."""
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    return (r, en(ctypes.get_errno()) if r == -1 else None)

def attempt(name, fn):
    """R[name] = "ok" (None/True returned), the value returned, or the errno name."""
    try:
        v = fn()
        R[name] = "ok" if v is None or v is True else v
    except OSError as e:
        R[name] = en(e.errno) if e.errno else "exc:OSError:%s" % e
    except Exception as e:
        R[name] = "exc:%s:%s" % (type(e).__name__, e)

def in_child(fn):
    """Run fn in a forked child (for attempts that may kill the process or change
    its state). fn returns None/"ok" or an errno name. Result: "ok", the errno
    name, "signal:N" if the child was killed, "exit:N" for anything else."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            r = fn()
            if r in (None, "ok", True):
                os._exit(0)
            os._exit(getattr(errno, r, 250) if isinstance(r, str) else 251)
        except OSError as e:
            os._exit(e.errno if e.errno and e.errno < 250 else 252)
        except BaseException:
            os._exit(253)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        return "signal:%d" % os.WTERMSIG(st)
    code = os.WEXITSTATUS(st)
    if code == 0:
        return "ok"
    return en(code) if code < 250 else "exit:%d" % code

def opened(path, flags, mode=0o600):
    fd = os.open(path, flags, mode)
    os.close(fd)

def read_file(path):
    with open(path, "rb") as f:
        f.read()

def done():
    print(json.dumps(R), flush=True)
'''


def probe_code(body: str, params: dict | None = None) -> str:
    return (PROBE_LIB + f"P = json.loads({json.dumps(json.dumps(params or {}))})\n"
            + textwrap.dedent(body) + "\ndone()\n")


def last_json(stdout: str):
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


class Sandbox:
    """Runs `confine exec` as root or as the test account, in a fresh workdir.

    mode "root": confine is started by root (the agent runs as `agent`, the
    workdir's owner, or root itself with `--user root` in `opts`).
    mode "user": confine is started by the test account via setpriv.
    """

    def __init__(self, mode: str, pw, workdir: str, agent=None, opts=(), groups=None):
        self.mode = mode
        self.pw = pw                      # the account that starts confine in "user" mode
        self.agent = agent or pw          # the identity the agent runs as
        self.workdir = workdir
        self.home = self.agent.pw_dir
        self.opts = list(opts)
        self.groups = groups              # supplementary groups of the launcher ("user" mode)
        self.env = []                     # extra environment of every confine command
        self.layers = "all"               # "all" or "landlock" (see without_namespaces)
        self.wrap: list[str] = []         # runs confine under a host condition (tests/conditions)

    def without_namespaces(self) -> "Sandbox":
        """The same sandbox, but confine runs without its mount and pid namespaces
        (CONFINE_TEST_NO_NAMESPACES=1, accepted with --degrade mount_namespace):
        Landlock, seccomp, capabilities and no_new_privs alone. A vector blocked
        here is blocked by those layers, not only by the read-only host view."""
        sb = copy.copy(self)
        sb.opts = self.opts + ["--degrade", "mount_namespace"]
        sb.env = self.env + [NO_NAMESPACES]
        sb.layers = "landlock"
        return sb

    # -- command lines
    def _env(self, who) -> list[str]:
        return ["env", "-i", f"HOME={who.pw_dir}", f"PATH={BASE_PATH}", "LANG=C.UTF-8",
                f"USER={who.pw_name}"]

    def _as(self, who, groups=None) -> list[str]:
        """Prefix that runs a command as `who` (nothing for root)."""
        if who.pw_uid == 0 and not groups:
            return []
        g = ["--clear-groups"] if not groups else [f"--groups={','.join(map(str, groups))}"]
        return ["setpriv", f"--reuid={who.pw_uid}", f"--regid={who.pw_gid}", *g, "--"]

    def cmd(self, args: list[str], env_extra=()) -> list[str]:
        if self.mode == "user":
            prefix = self._as(self.pw, self.groups) + self._env(self.pw)
        else:
            prefix = self._env(pwd.getpwuid(0))
        return prefix + self.env + list(env_extra) + self.wrap + [CONFINE] + list(args)

    def exec_cmd(self, cmd: list[str], *opts: str, env_extra=()) -> list[str]:
        return self.cmd(["exec", "-w", self.workdir, *self.opts, *opts, "--", *cmd],
                        env_extra=env_extra)

    def outside_cmd(self, cmd: list[str], env_extra=()) -> list[str]:
        """The same command as the agent identity, NOT confined (the control)."""
        groups = self.groups if self.agent.pw_uid == self.pw.pw_uid else None
        return self._as(self.agent, groups) + self._env(self.agent) + list(env_extra) + list(cmd)

    # -- running
    def run(self, cmd: list[str], *opts: str, input=None, timeout=60, cwd=None, env_extra=(),
            pass_fds=(), stdin=None):
        full = self.exec_cmd(cmd, *opts, env_extra=env_extra)
        kw = {"stdin": stdin} if stdin is not None else {"input": input}
        return subprocess.run(full, capture_output=True, text=True, timeout=timeout,
                              cwd=cwd or self.workdir, pass_fds=pass_fds, **kw)

    def popen(self, cmd: list[str], *opts: str, env_extra=(), **kw):
        full = self.exec_cmd(cmd, *opts, env_extra=env_extra)
        kw.setdefault("cwd", self.workdir)
        return subprocess.Popen(full, **kw)

    def outside(self, cmd: list[str], input=None, timeout=60, env_extra=(), pass_fds=(),
                stdin=None):
        kw = {"stdin": stdin} if stdin is not None else {"input": input}
        return subprocess.run(self.outside_cmd(cmd, env_extra), capture_output=True, text=True,
                              timeout=timeout, cwd=self.workdir, pass_fds=pass_fds, **kw)

    def confine(self, *args: str, timeout=60, cwd=None, env_extra=()):
        return subprocess.run(self.cmd(list(args), env_extra=env_extra), capture_output=True,
                              text=True, timeout=timeout, cwd=cwd or self.workdir)

    def py(self, code: str, *opts: str, timeout=60, **kw):
        """Run python code inside; it must print one JSON line; returns (proc, data)."""
        p = self.run([PY, "-c", textwrap.dedent(code)], *opts, timeout=timeout, **kw)
        return p, last_json(p.stdout)

    def probe(self, body: str, params=None, *opts: str, timeout=60, **kw):
        """Run a probe (see PROBE_LIB) inside; returns (proc, results dict)."""
        p = self.run([PY, "-c", probe_code(body, params)], *opts, timeout=timeout, **kw)
        return p, last_json(p.stdout)

    def outside_probe(self, body: str, params=None, timeout=60, **kw):
        """The same probe as the same identity, unconfined: the control."""
        p = self.outside([PY, "-c", probe_code(body, params)], timeout=timeout, **kw)
        return p, last_json(p.stdout)


_MY_WORKDIRS: set[str] = set()


def make_workdir(pw) -> str:
    d = tempfile.mkdtemp(prefix="confine-wd-", dir="/tmp")
    _MY_WORKDIRS.add(d)
    os.chmod(d, 0o755)
    if os.geteuid() == 0:
        os.chown(d, pw.pw_uid, pw.pw_gid)
    return d


def _need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (to create the test account's processes and switch to it)")


@pytest.fixture(params=["root", "user"])
def sandbox(request, confine_bin, test_user):
    _need_root()
    wd = make_workdir(test_user)
    yield Sandbox(request.param, test_user, wd)
    shutil.rmtree(wd, ignore_errors=True)


@pytest.fixture
def root_sandbox(confine_bin, test_user):
    _need_root()
    wd = make_workdir(test_user)
    yield Sandbox("root", test_user, wd)
    shutil.rmtree(wd, ignore_errors=True)


@pytest.fixture
def user_sandbox(confine_bin, test_user):
    _need_root()
    wd = make_workdir(test_user)
    yield Sandbox("user", test_user, wd)
    shutil.rmtree(wd, ignore_errors=True)


@pytest.fixture
def root_agent(confine_bin, test_user):
    """Started by root with a root-owned workdir and `--user root`: the agent is uid 0
    (without capabilities). Its outside control runs as root."""
    _need_root()
    wd = make_workdir(pwd.getpwuid(0))
    yield Sandbox("root", test_user, wd, agent=pwd.getpwuid(0), opts=("--user", "root"))
    shutil.rmtree(wd, ignore_errors=True)


@pytest.fixture(scope="session")
def planted_home(test_user):
    """Secrets and dotfiles in the test account's real home (created, never the
    machine's own)."""
    home = test_user.pw_dir
    files = {
        ".ssh/id_rsa": "-----BEGIN FAKE KEY-----\n",
        ".aws/credentials": "[default]\naws_secret_access_key=fake\n",
        ".bashrc": "# test bashrc\n",
        ".gitconfig": "[user]\n\tname = Confine Test\n\temail = test@example.invalid\n",
        ".netrc": "machine example.invalid login x password y\n",
        "notes.txt": "private notes\n",
    }
    for rel, text in files.items():
        p = os.path.join(home, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o600)
    # Only what was planted (and the directories made for it): the rest of the
    # account's home is other tests' business (quarantine trees can be deep).
    for rel in files:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            os.lchown(os.path.join(home, *parts[:i]), test_user.pw_uid, test_user.pw_gid)
    return home


@pytest.fixture
def outside_dir(test_user):
    """A directory outside the workdir, owned by the test account (so only the
    sandbox, not file permissions, stands between the agent and it)."""
    d = tempfile.mkdtemp(prefix="confine-out-", dir="/tmp")
    os.chmod(d, 0o755)
    os.chown(d, test_user.pw_uid, test_user.pw_gid)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write_owned(path: str, text: str, pw, mode=0o644) -> str:
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


# --- processes started outside the sandbox ---------------------------------------------

def _alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(")") + 2] != "Z"


def wait_dead(pid: int, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def kill_quietly(pid: int, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _ppid_and_nspid(pid: int):
    """(parent pid, NSpid list) of a host pid, or None if it is gone."""
    ppid, nspid = None, None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("PPid:"):
                    ppid = int(line.split()[1])
                elif line.startswith("NSpid:"):
                    nspid = [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        return None
    return (ppid, nspid) if ppid is not None and nspid else None


def host_pid(ns_pid: int, ancestor: int) -> int:
    """The host pid of a process that printed `ns_pid` ($$, $!) from inside the
    sandbox. In the agent's pid namespace that number is local (the agent is 3),
    so look on the host for the descendant of `ancestor` (the confine supervisor,
    still alive) whose innermost NSpid is ns_pid. Without a pid namespace the
    NSpid has one entry and this is ns_pid itself."""
    info = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            got = _ppid_and_nspid(int(name))
            if got:
                info[int(name)] = got

    def under(pid):
        seen = set()
        while pid in info and pid not in seen:
            seen.add(pid)
            pid = info[pid][0]
            if pid == ancestor:
                return True
        return False
    found = [pid for pid, (_, nspid) in info.items() if nspid[-1] == ns_pid and under(pid)]
    assert len(found) == 1, f"no unique descendant of {ancestor} with inner pid {ns_pid}: {found}"
    return found[0]


@pytest.fixture
def outside_sleeper(test_user):
    """`sleep` running as the test account, outside any sandbox."""
    p = subprocess.Popen(["setpriv", f"--reuid={test_user.pw_uid}", f"--regid={test_user.pw_gid}",
                          "--clear-groups", "--", "env", "-i", "SECRET_IN_ENVIRON=outside-secret",
                          "/bin/sleep", "300"])
    yield p.pid
    p.kill()
    p.wait()


@pytest.fixture
def root_sleeper():
    p = subprocess.Popen(["env", "-i", "SECRET_IN_ENVIRON=outside-secret", "/bin/sleep", "300"])
    yield p.pid
    p.kill()
    p.wait()


# --- terminals -------------------------------------------------------------------------

def pty_run(argv: list[str], inputs=(), timeout=30.0, cwd=None):
    """Run argv with a new pty as its controlling terminal (stdin/out/err).
    `inputs` is a list of (condition, bytes_to_send): condition None sends at
    once, bytes waits until they appear in the output that arrived since the
    previous send, a float waits that many seconds. Returns (exit status as a
    shell would report it, all output bytes)."""
    pid, fd = pty.fork()
    if pid == 0:  # child: never return into pytest
        try:
            if cwd:
                os.chdir(cwd)
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    out = b""
    pending = list(inputs)
    mark, since = 0, time.monotonic()
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            while pending:
                cond, data = pending[0]
                ready = (cond is None or (isinstance(cond, float) and time.monotonic() - since >= cond)
                         or (isinstance(cond, bytes) and cond in out[mark:]))
                if not ready:
                    break
                pending.pop(0)
                if data:
                    os.write(fd, data)
                mark, since = len(out), time.monotonic()
            r, _, _ = select.select([fd], [], [], 0.05)
            if r:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the slave side was closed
                    chunk = b""
                if not chunk:
                    break
                out += chunk
        else:
            kill_quietly(pid)
    finally:
        _, st = os.waitpid(pid, 0)
        os.close(fd)
    status = 128 + os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st)
    return status, out


def landlock_abi() -> int:
    """The running kernel's Landlock ABI, asked directly (not through confine)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(444), None, ctypes.c_long(0), ctypes.c_long(1))
    return max(int(r), 0)


# --- tiers -----------------------------------------------------------------------------
# unit: tests/unit/, pure Python on the checkout (no root, no install): ./test.sh --fast
# e2e:  runs the installed confine (real confined processes); root: needs root
# tools: needs external tools (apparmor_parser, checkpolicy, systemd-analyze, ...)
_E2E_FIXTURES = {"confine_bin", "sandbox", "root_sandbox", "user_sandbox", "root_agent",
                 "confine_cmd"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = item.path.parts
        if "unit" in parts:
            item.add_marker(pytest.mark.unit)
            continue
        used = set(getattr(item, "fixturenames", ()))
        if used & _E2E_FIXTURES:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.root)
        if "export" in parts:
            item.add_marker(pytest.mark.tools)


def _modules(items) -> dict:
    """The selected items by test module, in collection order."""
    out: dict = {}
    for item in items:
        mod = getattr(item, "module", None)
        if mod is not None:
            out.setdefault(mod, []).append(item)
    return out


def pytest_collection_finish(session):
    """A test module's `start_early(items)` (its selected items) submits an expensive
    setup that waits for nothing (install.sh's installs, the linked SELinux policy) to
    tests/background.py, which runs them one at a time while the tests collected before
    them run. Its fixture waits for the result; `stop_early()` ends it."""
    if session.config.option.collectonly:
        return
    for mod, items in _modules(session.items).items():
        start = getattr(mod, "start_early", None)
        if start is not None:
            start(items)


def pytest_sessionfinish(session):
    for mod in _modules(getattr(session, "items", ())):
        stop = getattr(mod, "stop_early", None)
        if stop is not None:
            stop()


HELD_BASES = ("/var/lib/confine/held",
              os.path.expanduser("~confine-test/.local/state/confine/held"),
              # the runs' records (journal/store.py): one file per run, RUN.jsonl
              "/var/lib/confine/runs",
              os.path.expanduser("~confine-test/.local/state/confine/runs"),
              # what runs kept for `confine undo` (confine/undo/): same manifest
              "/var/lib/confine/undo",
              os.path.expanduser("~confine-test/.local/state/confine/undo"))


@pytest.fixture(autouse=True)
def _unit_state_home(request, tmp_path_factory, monkeypatch):
    """The unit tier runs no confine and must not depend on this host's state:
    whatever a test reaches through the state directories (paths.state_dir) lands in
    a directory of its own, never in the account's ~/.local/state or root's
    /var/lib/confine (issue 23 item 3). Here, not in a tests/unit/conftest.py: that
    one would be imported as `conftest` too and shadow this file for the e2e tests."""
    if request.node.get_closest_marker("unit") is not None:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    yield


@pytest.fixture(autouse=True)
def _no_held_leftovers(request):
    """Runs that hold protected names (protect/held.py) leave state for the
    person; what a test's runs left goes with the test. The unit tier runs no
    confine, so it never looks at the host's state (root's is unreadable to the
    unprivileged user the fast tier is for)."""
    if request.node.get_closest_marker("unit") is not None:
        yield
        return

    def runs(b):
        try:
            return set(os.listdir(b))
        except FileNotFoundError:
            return set()
    def others(d):
        # another pytest on this machine (a second checkout's suite) makes runs in
        # the same bases: those are its to remove, not ours
        try:
            if d.endswith(".jsonl"):     # a record: its start line names the workdir
                with open(d) as f:
                    wd = json.loads(f.readline()).get("workdir", "")
            else:
                with open(os.path.join(d, "manifest.json")) as f:
                    wd = json.load(f).get("workdir", "")
        except OSError:
            return True     # still being written, or not a run: leave it
        except (ValueError, AttributeError):
            return False
        return (isinstance(wd, str) and wd.startswith("/tmp/confine-wd-")
                and not any(wd == w or wd.startswith(w + "/") for w in _MY_WORKDIRS))
    before = {b: runs(b) for b in HELD_BASES}
    yield
    for b, old in before.items():
        for n in runs(b) - old:
            d = os.path.join(b, n)
            if not others(d):
                if d.endswith(".jsonl"):
                    try:
                        os.unlink(d)
                    except FileNotFoundError:
                        pass
                else:
                    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _no_run_leftovers_at_the_end():
    """Runs made by a module-scoped fixture (set up before the snapshot above) are
    removed at the end of the session, when their workdir was one of its own."""
    yield
    for b in HELD_BASES:
        try:
            names = os.listdir(b)
        except OSError:
            continue
        for n in names:
            d = os.path.join(b, n)
            try:
                with open(os.path.join(d, "manifest.json")) as f:
                    wd = json.load(f).get("workdir", "")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(wd, str) and any(wd == w or wd.startswith(w + "/")
                                           for w in _MY_WORKDIRS):
                shutil.rmtree(d, ignore_errors=True)


def make_sdist(where: str, pw) -> str:
    """A local source distribution: pip builds a wheel from it and keeps that wheel
    in its cache (the second install says "Using cached")."""
    src = os.path.join(where, "src")
    os.makedirs(src)
    with open(os.path.join(src, "setup.py"), "w") as f:
        f.write('from setuptools import setup\n'
                'setup(name="confdemo", version="1.0", py_modules=["confdemo"])\n')
    with open(os.path.join(src, "confdemo.py"), "w") as f:
        f.write("X = 1\n")
    wh = os.path.join(where, "wh")
    os.makedirs(wh)
    with tarfile.open(os.path.join(wh, "confdemo-1.0.tar.gz"), "w:gz") as t:
        for n in ("setup.py", "confdemo.py"):
            t.add(os.path.join(src, n), arcname=f"confdemo-1.0/{n}")
    for dirpath, dirnames, filenames in os.walk(where):
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), pw.pw_uid, pw.pw_gid)
    return wh

"""Protected names are refused while the agent runs (guard.py, mediation/files.py).

The read-only binds only cover protected paths that exist at start; these
tests create new ones, every way the kernel offers (open, creat, mkdir,
mknod, symlink, link, rename, O_TMPFILE + linkat, a final symlink, a
symlinked directory, /proc/self/fd), as the root-started agent and as the
unprivileged launcher, with all layers and with Landlock/seccomp alone. Each
refusal is paired with the same call on an ordinary name, which must work,
and the workdir is checked from outside afterwards: nothing may exist there,
not even for the exit-time quarantine to catch.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

PLANT_BODY = r'''
import stat, threading
O = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
os.makedirs("sub", exist_ok=True)

def tmpfile_link(name):
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
    try:
        r = libc.linkat(fd, b"", -100, name.encode(), 0x1000)   # AT_EMPTY_PATH
        if r != 0:
            e = ctypes.get_errno()
            r = libc.linkat(-100, ("/proc/self/fd/%d" % fd).encode(), -100, name.encode(), 0x400)
            if r != 0:
                raise OSError(ctypes.get_errno() or e, "linkat")
    finally:
        os.close(fd)

def prepared_git(where):
    os.makedirs(where + "/prep/hooks")
    opened(where + "/prep/hooks/post-checkout", O, 0o755)
    os.rename(where + "/prep", where + "/.git")

def final_symlink(link, target):
    os.symlink(target, link)
    opened(link, O)

def symlinked_dir():
    os.mkdir("r1"); os.mkdir("r1/.git"); os.mkdir("r1/.git/hooks")
    os.symlink("r1/.git/hooks", "hooklink")
    opened("hooklink/pre-commit", O, 0o755)

for name in P["names"]:
    attempt("open:" + name, lambda n=name: opened(n, O))
    attempt("creat:" + name, lambda n=name: sysc(85, n.encode(), 0o644) if P["x86"] else opened(n, O))
    attempt("mknod:" + name, lambda n=name: os.mkfifo(n))
    attempt("symlink:" + name, lambda n=name: os.symlink("/tmp", n))
    attempt("link:" + name, lambda n=name: (opened("src-" + n.replace("/", "_"), O),
                                           os.link("src-" + n.replace("/", "_"), n))[-1])
    attempt("rename:" + name, lambda n=name: (opened("mv-" + n.replace("/", "_"), O),
                                             os.rename("mv-" + n.replace("/", "_"), n))[-1])
    attempt("tmpfile:" + name, lambda n=name: tmpfile_link(n))
attempt("mkdir:.vscode", lambda: os.mkdir(".vscode"))
attempt("mkdir:.claude/commands", lambda: (os.makedirs(".claude", exist_ok=True),
                                          os.mkdir(".claude/commands"))[-1])
attempt("rename-dir:.git", lambda: prepared_git("nested1"))
attempt("gitfile", lambda: (os.makedirs("nested2", exist_ok=True),
                            opened("nested2/.git", O))[-1])
attempt("final-symlink", lambda: final_symlink("innocent", ".envrc"))
attempt("symlinked-dir", symlinked_dir)
attempt("new-repo-hook", lambda: (os.makedirs("nested3/.git/hooks"),
                                  opened("nested3/.git/hooks/pre-commit", O, 0o755))[-1])
attempt("new-repo-config-direct", lambda: (os.makedirs("nested4/.git"),
                                           opened("nested4/.git/config", O))[-1])
attempt("proc-self-cwd", lambda: opened("/proc/self/cwd/.envrc", O))
attempt("dirfd-relative", lambda: (lambda d: (os.open(".mcp.json", O, 0o644, dir_fd=d)))(
    os.open("sub", os.O_RDONLY | os.O_DIRECTORY)))
'''

NAMES = [".envrc", "sub/.envrc", ".mcp.json", ".bashrc", ".vscode/tasks.json",
         ".claude/settings.json", ".idea/workspace.xml"]
ORDINARY = ["plain.txt", "sub/plain.txt", "mcp.json", "sub/envrc"]


@pytest.fixture(params=["all", "landlock"])
def layers(request):
    return request.param


# A new regular file or directory at a protected name is held (protect/held.py):
# the call succeeds, the name never appears in the workdir (the walk below).
HELD_OPS = ("open:", "creat:", "mkdir:", "proc-self-cwd", "dirfd-relative", "final-symlink",
            # a `.git` file opened for writing is made without a name and appears
            # only with a checked `gitdir:` line (protect/gitlink.py): this one never
            "gitfile")


def test_new_protected_names_are_refused(sandbox, layers):
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    # .vscode/.claude/.idea must exist for their files to be tried
    p, r = box.probe("os.makedirs('.claude')\n" + PLANT_BODY,
                     {"names": NAMES, "x86": os.uname().machine == "x86_64"}, timeout=90)
    assert r is not None, p.stderr
    refused = {k: v for k, v in r.items() if v == "ok" and not k.startswith(HELD_OPS)}
    assert not refused, f"created protected names ({layers}): {refused}\n{p.stderr}"
    for k, v in r.items():
        assert v in ("EACCES", "EPERM", "ENOENT") or k.startswith(HELD_OPS), (k, v)
    assert r["open:.envrc"] == r["mkdir:.vscode"] == r["final-symlink"] == "ok", r
    # nothing protected exists afterwards (not even for the quarantine to catch)
    found = []
    for dirpath, dirnames, filenames in os.walk(box.workdir):
        for n in filenames + dirnames:
            rel = os.path.relpath(os.path.join(dirpath, n), box.workdir)
            if rel.startswith("nested1/prep"):
                continue                    # prepared, but never renamed to .git
            if n in (".envrc", ".mcp.json", ".bashrc", "tasks.json", "settings.json",
                     "workspace.xml", "post-checkout", "pre-commit", "commands") \
                    or rel in ("nested1/.git", "nested2/.git", "nested4/.git/config"):
                found.append(rel)
    assert not found, found
    assert "PROTECTED PATHS WERE CHANGED" not in p.stderr, p.stderr
    # one line per kind and path (runtime/events.py): the first refusal at .envrc says it
    assert re.search(r"denied: (symlink|mknod) \S*/\.envrc: protected path \(\.envrc\)",
                     p.stderr), p.stderr
    assert "confine:   held .envrc (file" in p.stderr, p.stderr


ORDINARY_BODY = r'''
O = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
os.makedirs("sub", exist_ok=True)
for name in P["names"]:
    attempt("open:" + name, lambda n=name: opened(n, O))
    attempt("mknod:" + name, lambda n=name: os.mkfifo(n + ".fifo"))
    attempt("symlink:" + name, lambda n=name: os.symlink("/tmp", n + ".ln"))
    attempt("link:" + name, lambda n=name: os.link(n, n + ".hard"))
    attempt("rename:" + name, lambda n=name: os.rename(n + ".hard", n + ".moved"))
attempt("mkdir", lambda: os.mkdir("d1"))
attempt("mkdir-slash", lambda: os.mkdir("d2/"))
attempt("mkdir .git and .claude", lambda: (os.mkdir(".git"), os.mkdir(".claude"))[-1])
attempt("claude notes", lambda: opened(".claude/notes.md", O))
attempt("final-symlink creates target", lambda: (os.symlink("made-by-link", "dangling"),
                                                 opened("dangling", O))[-1])
R["target exists"] = os.path.isfile("made-by-link")
'''


def test_ordinary_names_work_the_same_way(sandbox, layers):
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    p, r = box.probe(ORDINARY_BODY, {"names": ORDINARY})
    assert r is not None, p.stderr
    bad = {k: v for k, v in r.items() if v not in ("ok", True)}
    assert not bad, (bad, p.stderr)
    assert "denied" not in p.stderr


GIT_SCRIPT = r'''
set -u
git init -q repo && echo "init ok"
cd repo
git config user.name Agent && git config user.email a@example.invalid && echo "config ok"
git config core.hooksPath /tmp/x 2>/dev/null; echo "hookspath rc=$?"
git config core.fsmonitor "touch /tmp/pwned" 2>/dev/null; echo "fsmonitor rc=$?"
(echo "[core]"; echo "	pager = touch /tmp/pwned") >> .git/config 2>/dev/null; echo "append rc=$?"
echo '#!/bin/sh' > .git/hooks/pre-commit 2>/dev/null; echo "hook rc=$?"
mv .git/hooks/pre-commit.sample .git/hooks/pre-commit 2>/dev/null; echo "sample rename rc=$?"
echo hello > file && git add file && git commit -qm first && echo "commit ok"
git checkout -qb feature && git branch -q config && echo "branches ok"
ls .git/hooks | grep -c sample
'''


def test_git_works_and_its_new_config_is_checked(sandbox):
    p = sandbox.run(["/bin/bash", "-c", GIT_SCRIPT])
    out = p.stdout
    assert p.returncode == 0, (out, p.stderr)
    for line in ("init ok", "config ok", "commit ok", "branches ok"):
        assert line in out, (out, p.stderr)
    for what in ("hookspath", "fsmonitor", "append", "hook", "sample rename"):
        assert f"{what} rc=0" not in out, (what, out, p.stderr)
    cfg = open(os.path.join(sandbox.workdir, "repo/.git/config")).read()
    assert "name = Agent" in cfg and "hooksPath" not in cfg and "fsmonitor" not in cfg \
        and "pager" not in cfg, cfg
    hooks = os.listdir(os.path.join(sandbox.workdir, "repo/.git/hooks"))
    assert hooks and all(h.endswith(".sample") for h in hooks), hooks
    assert "core.hookspath not allowed" in p.stderr, p.stderr
    # and git, run afterwards by a person, runs nothing the agent planted
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}
    q = subprocess.run(["git", "-c", "safe.directory=*", "status", "--short"],
                       cwd=os.path.join(sandbox.workdir, "repo"), env=env,
                       capture_output=True, text=True)
    assert q.returncode == 0, q.stderr


ALIAS_BODY = r'''
import subprocess
subprocess.run(["git", "init", "-q", "r"], check=True)
cfg = "r/.git/config"
def moved_then_written():
    os.rename(cfg, "moved")
    try:
        opened("moved", os.O_WRONLY | os.O_APPEND)
    finally:
        os.rename("moved", cfg)
attempt("moved", moved_then_written)
attempt("hard link", lambda: os.link(cfg, "alias"))
fd = os.open(cfg, os.O_RDONLY)
attempt("reopen", lambda: opened("/proc/self/fd/%d" % fd, os.O_WRONLY))
attempt("reopen devfd", lambda: opened("/dev/fd/%d" % fd, os.O_RDWR))
attempt("truncate", lambda: os.truncate(cfg, 0))
attempt("rdonly trunc", lambda: opened(cfg, os.O_RDONLY | os.O_TRUNC))
attempt("chmod then write", lambda: (os.chmod(cfg, 0o666), opened(cfg, os.O_WRONLY))[-1])
attempt("exchange", lambda: (opened("evil", os.O_WRONLY | os.O_CREAT),
                              sysc(316, -100, b"evil", -100, cfg.encode(), 2))[-1])
R["size"] = os.stat(cfg).st_size
attempt("read", lambda: read_file(cfg))
'''


def test_a_checked_git_config_cannot_be_written_by_another_way(sandbox):
    p, r = sandbox.probe(ALIAS_BODY)
    assert r is not None, p.stderr
    assert r.pop("read") == "ok" and r.pop("size") > 0, (r, p.stderr)
    assert all(v in ("EACCES", "EPERM") for v in r.values()), (r, p.stderr)


SEMANTICS_BODY = r'''
import fcntl, stat, threading
os.umask(0o027)
def umask_file():
    opened("u", os.O_WRONLY | os.O_CREAT, 0o666)
    return oct(stat.S_IMODE(os.stat("u").st_mode))
attempt("umask file", umask_file)
def tmpfile_mode():
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o666)
    m = oct(stat.S_IMODE(os.fstat(fd).st_mode)); os.close(fd)
    return m
attempt("umask tmpfile", tmpfile_mode)
attempt("umask dir", lambda: (os.mkdir("ud", 0o777), oct(stat.S_IMODE(os.stat("ud").st_mode)))[-1])
# the umask of the very thread, read afresh on each call (the broker reads it
# for mkdir and plain O_CREAT, the supervisor for O_EXCL)
def modes(tag, mask):
    os.umask(mask)
    os.mkdir(tag + "d", 0o777)
    os.close(os.open(tag + "f", os.O_WRONLY | os.O_CREAT, 0o666))
    os.close(os.open(tag + "x", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    return [oct(stat.S_IMODE(os.stat(tag + k).st_mode)) for k in "dfx"]
attempt("umask changed", lambda: modes("c1", 0o077) + modes("c2", 0o002))
def thread_umask():
    # a thread's own status file (unshare(CLONE_FS), a umask of its own, is denied)
    out = {}
    def t():
        out["v"] = modes("t1", 0o066)
    th = threading.Thread(target=t); th.start(); th.join()
    return out["v"] + modes("t2", 0o027)
attempt("thread umask", thread_umask)
def child_umask():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(w, repr(modes("k1", 0o007)).encode())
        finally:
            os._exit(0)
    os.close(w); os.waitpid(pid, 0)
    got = eval(os.read(r, 200).decode())
    return got + modes("k2", 0o027)
attempt("child umask", child_umask)
os.umask(0o027)
def raw_cloexec(flags):
    fd = libc.open(b"u", flags)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "open")
    v = fcntl.fcntl(fd, fcntl.F_GETFD)
    os.close(fd)
    return v
attempt("no cloexec", lambda: raw_cloexec(os.O_WRONLY))
attempt("cloexec", lambda: raw_cloexec(os.O_WRONLY | os.O_CLOEXEC))
def lowest():
    a = os.open("u", os.O_RDONLY); b = os.open("u", os.O_RDONLY)
    os.close(a)
    fd = libc.open(b"u", os.O_WRONLY)
    os.close(b); os.close(fd)
    return fd == a
attempt("lowest fd", lowest)
attempt("excl existing", lambda: opened("u", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
attempt("nofollow link", lambda: (os.symlink("u", "ul"), opened("ul", os.O_WRONLY | os.O_NOFOLLOW))[-1])
def trunc_append():
    with open("t", "w") as f: f.write("abcdef")
    opened("t", os.O_WRONLY | os.O_TRUNC)
    fd = os.open("t", os.O_WRONLY | os.O_APPEND); os.write(fd, b"xy"); os.write(fd, b"z"); os.close(fd)
    return open("t").read()
attempt("trunc append", trunc_append)
attempt("truncate()", lambda: (os.truncate("t", 1), open("t").read())[-1])
def pipe_reopen():
    r, w = os.pipe()
    fd = os.open("/dev/fd/%d" % w, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, b"p")
    return os.read(r, 10).decode()
attempt("dev fd pipe", pipe_reopen)
def thread_self():
    r, w = os.pipe()
    out = {}
    def t():
        fd = os.open("/proc/thread-self/fd/%d" % w, os.O_WRONLY)
        os.write(fd, b"t"); out["v"] = os.read(r, 10).decode()
    th = threading.Thread(target=t); th.start(); th.join()
    return out.get("v")
attempt("thread-self", thread_self)
def dirfd_rel():
    os.mkdir("dd")
    d = os.open("dd", os.O_RDONLY | os.O_DIRECTORY)
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=d))
    return os.path.exists("dd/f")
attempt("dirfd", dirfd_rel)
attempt("exchange", lambda: (opened("x1", os.O_WRONLY | os.O_CREAT), opened("x2", os.O_WRONLY | os.O_CREAT),
                             sysc(316, -100, b"x1", -100, b"x2", 2))[-1])
attempt("noreplace", lambda: sysc(316, -100, b"x1", -100, b"x2", 1))
def two_dirs():
    # a rename's two names, one from the cwd and one from a dirfd, then back
    d = os.open("dd", os.O_RDONLY | os.O_DIRECTORY)
    os.rename("x1", "moved", dst_dir_fd=d)
    os.link("moved", "x1", src_dir_fd=d)
    os.rename("x1", "x3")
    return [os.path.exists("dd/moved"), os.path.exists("x3"), os.path.exists("x1")]
attempt("two dirs", two_dirs)
def proc_fd_dir():
    # through the agent's own /proc/self/fd/N (and /dev/fd/N) of a directory, at a
    # number the broker holds no descriptor at (Claude Code makes its task dirs so)
    d = os.open("dd", os.O_RDONLY | os.O_DIRECTORY)
    os.dup2(d, 900); os.close(d)
    os.mkdir("/proc/self/fd/900/pm")
    os.close(os.open("/dev/fd/900/pf", os.O_WRONLY | os.O_CREAT, 0o600))
    os.rename("/proc/self/fd/900/pf", "/proc/thread-self/fd/900/pg")
    os.close(900)
    return [os.path.isdir("dd/pm"), os.path.isfile("dd/pg")]
attempt("proc fd dir", proc_fd_dir)
attempt("creat slash", lambda: opened("newdir/", os.O_WRONLY | os.O_CREAT))
attempt("fifo nonblock", lambda: (os.mkfifo("ff"), opened("ff", os.O_WRONLY | os.O_NONBLOCK))[-1])
attempt("openat2", lambda: sysc(437, -100, b"u", ctypes.c_char_p(bytes(24)), 24))
attempt("enoent", lambda: opened("nodir/x", os.O_WRONLY | os.O_CREAT))
attempt("outside workdir", lambda: opened("/etc/confine-guard-test", os.O_WRONLY | os.O_CREAT))
attempt("dev null", lambda: opened("/dev/null", os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
# a name in the dirfd itself (broker: no walk for it): the kernel's checks still come first
nf = os.open("u", os.O_RDONLY)
attempt("file dirfd", lambda: os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=nf))
attempt("file dirfd mkdir", lambda: os.mkdir("m", dir_fd=nf))
os.mkdir("nx", 0o700)
nx = os.open("nx", os.O_PATH | os.O_DIRECTORY)
os.chmod("nx", 0o600)                        # no search permission, even for its owner
attempt("no search", lambda: os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=nx))
attempt("no search mkdir", lambda: os.mkdir("m", dir_fd=nx))
attempt("no search held", lambda: os.open(".envrc", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=nx))
attempt("no search held dir", lambda: os.mkdir(".vscode", dir_fd=nx))
os.chmod("nx", 0o700)
attempt("made nothing", lambda: sorted(os.listdir("nx")))
'''


def test_mediated_calls_keep_the_kernel_semantics(sandbox):
    p, r = sandbox.probe(SEMANTICS_BODY)
    assert r is not None, p.stderr
    want = {"umask file": "0o640", "umask tmpfile": "0o640", "umask dir": "0o750",
            "umask changed": ["0o700", "0o600", "0o600", "0o775", "0o664", "0o664"],
            "thread umask": ["0o711", "0o600", "0o600", "0o750", "0o640", "0o640"],
            "child umask": ["0o770", "0o660", "0o660", "0o750", "0o640", "0o640"],
            "no cloexec": 0, "cloexec": 1,
            "lowest fd": "ok", "excl existing": "EEXIST", "nofollow link": "ELOOP",
            "trunc append": "xyz", "truncate()": "x", "dev fd pipe": "p", "thread-self": "t",
            "dirfd": "ok", "exchange": "ok", "noreplace": "EEXIST", "creat slash": "EISDIR",
            "fifo nonblock": "ENXIO", "openat2": "ENOSYS", "enoent": "ENOENT",
            "outside workdir": "EACCES", "dev null": "ok", "file dirfd": "ENOTDIR",
            "file dirfd mkdir": "ENOTDIR", "no search": "EACCES", "no search mkdir": "EACCES",
            "no search held": "EACCES", "no search held dir": "EACCES",
            "made nothing": [], "two dirs": [True, True, False],
            "proc fd dir": [True, True]}
    assert r.pop("outside workdir") in ("EACCES", "EROFS"), (r, p.stderr)
    want.pop("outside workdir")
    assert r == want, (r, p.stderr)


UMASK_NO_PROC_BODY = r'''
import stat
attempt("proc", lambda: open("/proc/self/status").read(1))
os.umask(0o027)
def made(name, fn):
    fn(name)
    return oct(stat.S_IMODE(os.stat(name).st_mode))
mk = lambda n: os.mkdir(n, 0o777)
cr = lambda n: os.close(os.open(n, os.O_WRONLY | os.O_CREAT, 0o666))
attempt("modes", lambda: [made("d1", mk), made("f1", cr), made("d2", mk), made("f2", cr)])
os.umask(0o002)
attempt("changed", lambda: [made("d3", mk), made("f3", cr)])
attempt("existing", lambda: (cr("f1"), os.mkdir("d1"))[-1])
'''


def test_the_umask_without_proc_in_the_profile(confine_bin, test_user):
    """A profile that grants no /proc: the broker cannot read the agent's
    umask, so the supervisor does (once told) and hands the call over again."""
    import tempfile

    from conftest import Sandbox, make_workdir
    wd = make_workdir(test_user)
    prof = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    prof.write("filesystem:\n  read:\n    - /usr\n    - ?/bin\n    - ?/lib\n    - ?/lib64\n"
               "    - /etc\n  devices:\n    - /dev/null\n")
    prof.close()
    os.chmod(prof.name, 0o644)
    try:
        p, r = Sandbox("root", test_user, wd).probe(UMASK_NO_PROC_BODY, None, "-p", prof.name)
        assert r == {"proc": "EACCES", "modes": ["0o750", "0o640", "0o750", "0o640"],
                     "changed": ["0o775", "0o664"], "existing": "EEXIST"}, (r, p.stderr)
    finally:
        os.unlink(prof.name)
        shutil.rmtree(wd, ignore_errors=True)


def test_the_umask_without_namespaces(confine_bin, test_user):
    """Without a pid namespace the broker reads the agent's umask through the
    host's /proc, by host ids."""
    from conftest import Sandbox, make_workdir
    wd = make_workdir(test_user)
    try:
        box = Sandbox("root", test_user, wd).without_namespaces()
        p, r = box.probe(UMASK_NO_PROC_BODY.replace('attempt("proc", ', '(lambda *a: 0)(0, '))
        assert r == {"modes": ["0o750", "0o640", "0o750", "0o640"],
                     "changed": ["0o775", "0o664"], "existing": "EEXIST"}, (r, p.stderr)
    finally:
        shutil.rmtree(wd, ignore_errors=True)


RACE_BODY = r'''
import threading, time
os.mkdir(".claude")
os.mkdir("p")
os.symlink(".claude", "pl")
stop = time.monotonic() + P["seconds"]
opened("x", os.O_WRONLY | os.O_CREAT)
os.symlink(".mcp.json", "xl")
def swapper():
    while time.monotonic() < stop:
        sysc(316, -100, b"p", -100, b"pl", 2)      # RENAME_EXCHANGE: dir <-> symlink
        sysc(316, -100, b"x", -100, b"xl", 2)      # file <-> symlink to a protected name
def creator():
    while time.monotonic() < stop:
        for n in ("p/settings.json", "p/commands", "x"):
            try:
                if n.endswith("commands"):
                    os.mkdir(n); os.rmdir(n)
                elif n == "x":
                    opened(n, os.O_WRONLY | os.O_CREAT)
                else:
                    opened(n, os.O_WRONLY | os.O_CREAT); os.unlink(n)
                R["made"] = R.get("made", 0) + 1
            except OSError:
                R["refused"] = R.get("refused", 0) + 1
ts = [threading.Thread(target=swapper), threading.Thread(target=creator),
      threading.Thread(target=creator)]
[t.start() for t in ts]; [t.join() for t in ts]
R["leak"] = sorted(os.listdir(".claude")) + [n for n in (".mcp.json",) if os.path.lexists(n)]
'''


def test_swapping_a_directory_for_a_symlink_does_not_redirect_a_creation(sandbox):
    p, r = sandbox.probe(RACE_BODY, {"seconds": 3}, timeout=90)
    assert r is not None, p.stderr
    assert r["leak"] == [], (r, p.stderr)
    assert r.get("made", 0) > 0 and r.get("refused", 0) > 0, r   # both paths were exercised


def test_existing_protected_file_is_refused_without_namespaces(sandbox):
    """Without a mount namespace there are no read-only binds: the guard refuses
    the write by name (before, only the exit-time revert caught it)."""
    path = os.path.join(sandbox.workdir, ".envrc")
    with open(path, "w") as f:
        f.write("export A=1\n")
    os.chown(path, sandbox.pw.pw_uid, sandbox.pw.pw_gid)
    box = sandbox.without_namespaces()
    p, r = box.probe('attempt("append", lambda: opened(".envrc", os.O_WRONLY | os.O_APPEND))\n'
                     'attempt("read", lambda: read_file(".envrc"))')
    assert r == {"append": "EACCES", "read": "ok"}, (r, p.stderr)
    assert open(path).read() == "export A=1\n"


def test_protected_names_can_be_opted_out(sandbox):
    """`!.envrc` in the profile's protected list: then .envrc is an ordinary file."""
    prof = os.path.join(sandbox.workdir, "..", os.path.basename(sandbox.workdir) + ".yaml")
    with open(prof, "w") as f:
        f.write("extends: default\nprotected:\n  - '!.envrc'\n")
    os.chmod(prof, 0o644)
    try:
        p, r = sandbox.probe('attempt("envrc", lambda: opened(".envrc", os.O_WRONLY | os.O_CREAT))\n'
                             'attempt("mcp", lambda: os.symlink("x", ".mcp.json"))\n'
                             'attempt("mcp held", lambda: opened(".mcp.json", os.O_WRONLY | os.O_CREAT))\n'
                             'R["here"] = sorted(n for n in os.listdir(".") if n[0] == ".")',
                             None, "-p", prof)
        assert r == {"envrc": "ok", "mcp": "EACCES", "mcp held": "ok", "here": [".envrc"]}, \
            (r, p.stderr)
        assert os.path.isfile(os.path.join(sandbox.workdir, ".envrc"))
    finally:
        os.unlink(prof)


def test_git_clone_of_a_repo_with_protected_files_reports_them(sandbox):
    """A cloned repository that carries .envrc: the clone succeeds, .envrc is
    held (never in the workdir) and confine names it (more: test_held.py)."""
    src = os.path.join(sandbox.workdir, "src")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    subprocess.run(["git", "init", "-q", src], check=True, env=env)
    for rel in (".envrc", "main.py"):
        with open(os.path.join(src, rel), "w") as f:
            f.write("x\n")
    subprocess.run(["git", "-C", src, "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", src, "commit", "-qm", "x"], check=True, env=env)
    subprocess.run(["chown", "-R", f"{sandbox.pw.pw_uid}:{sandbox.pw.pw_gid}", src], check=True)
    p = sandbox.run(["git", "clone", "-q", "src", "dst"])
    # the clone's own status is 0; its index and commits carry .envrc, which the
    # person's next checkout or reset would write: noted, so the run exits 123
    assert p.returncode == 123, p.stderr
    assert "dst/.git/index" in p.stderr and "noted: staged entries" in p.stderr, p.stderr
    assert os.path.isfile(os.path.join(sandbox.workdir, "dst/main.py")), p.stderr
    assert not os.path.exists(os.path.join(sandbox.workdir, "dst/.envrc"))
    assert "confine:   held dst/.envrc (file, 2 bytes)" in p.stderr, p.stderr
    m = re.search(r"confine held discard (\S+)`", p.stderr)
    assert m and sandbox.confine("held", "discard", m.group(1)).returncode == 0


MOVE_IN_BODY = r'''
import subprocess
tmp = os.environ["TMPDIR"]
R["same fs"] = os.stat(tmp).st_dev == os.stat(".").st_dev
os.makedirs(tmp + "/proj/.git/hooks")
for rel in ("proj/.envrc", "proj/main.py", "proj/.git/hooks/post-checkout"):
    opened(tmp + "/" + rel, os.O_WRONLY | os.O_CREAT)
attempt("rename dir in", lambda: os.rename(tmp + "/proj", "proj"))
opened(tmp + "/plain", os.O_WRONLY | os.O_CREAT)
attempt("rename file in", lambda: os.rename(tmp + "/plain", "plain"))
R["mv"] = subprocess.run(["mv", tmp + "/proj", "proj"], capture_output=True).returncode
os.makedirs(".git/mods/lib/hooks")
opened(".git/mods/lib/hooks/pre-commit", os.O_WRONLY | os.O_CREAT)
attempt("rename to .git/modules", lambda: os.rename(".git/mods", ".git/modules"))
'''


def test_a_directory_from_outside_is_moved_in_name_by_name(sandbox):
    """rename(2) of a directory from the private tmp (same filesystem) into the
    workdir would bring an unjudged .envrc: EXDEV, and mv copies name by name.
    The private tmp stays on the workdir's filesystem (tmp_size: unlimited: no
    tmpfs of its own), so it is the broker's rule, not the kernel, that answers."""
    prof = sandbox.workdir + "-same-fs.yaml"
    with open(prof, "w") as f:
        f.write("extends: default\nlimits:\n  tmp_size: unlimited\n")
    os.chmod(prof, 0o644)
    try:
        p, r = sandbox.probe(MOVE_IN_BODY, None, "-p", prof)
    finally:
        os.unlink(prof)
    assert r is not None, p.stderr
    assert r["same fs"] is True                      # otherwise the kernel alone says EXDEV
    # (Landlock and separate mounts answer EXDEV first here; where they would not,
    # the broker's own rule does: test_move_in_rule_where_landlock_allows_the_rename.)
    assert r["rename dir in"] == "EXDEV" and r["rename file in"] in ("ok", "EXDEV"), (r, p.stderr)
    assert r["mv"] != 0                              # mv reports the files it could not copy
    assert r["rename to .git/modules"] == "EACCES", (r, p.stderr)
    wd = sandbox.workdir
    assert os.path.isfile(os.path.join(wd, "proj/main.py"))
    assert not os.path.exists(os.path.join(wd, "proj/.envrc"))
    assert not os.path.exists(os.path.join(wd, "proj/.git/hooks/post-checkout"))
    assert not os.path.exists(os.path.join(wd, ".git/modules"))


KILL_BROKER_BODY = r'''
import signal
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
attempt("before", lambda: opened("a", os.O_WRONLY | os.O_CREAT))
R["found"] = broker is not None
if broker:
    os.kill(broker, signal.SIGKILL)
    import time; time.sleep(0.3)
attempt("after", lambda: opened("b", os.O_WRONLY | os.O_CREAT))
attempt("envrc after", lambda: opened(".envrc", os.O_WRONLY | os.O_CREAT))
attempt("read after", lambda: read_file("a"))
'''


def test_killing_the_broker_fails_closed(root_sandbox):
    """The agent can signal the broker (same domain, same uid); then every
    mediated call fails, none is let through."""
    p, r = root_sandbox.probe(KILL_BROKER_BODY)
    assert r is not None, p.stderr
    assert r["found"] is True and r["before"] == "ok", (r, p.stderr)
    assert r["after"] == "EIO" and r["envrc after"] == "EIO" and r["read after"] == "ok", r
    assert "broker is gone" in p.stderr
    assert not os.path.exists(os.path.join(root_sandbox.workdir, ".envrc"))


def test_a_flood_of_denials_is_cut_short(root_sandbox):
    body = ('for i in range(150):\n'
            '    os.mkdir("d%d" % i)\n'
            '    attempt("e%d" % i, lambda i=i: os.symlink("x", "d%d/.envrc" % i))\n')
    p, r = root_sandbox.probe(body)
    assert r is not None and set(r.values()) == {"EACCES"}, p.stderr
    lines = p.stderr.splitlines()
    assert sum(1 for ln in lines if ln.startswith("confine: denied: ")) == 100
    assert "more than 100 different denials: no more are shown" in p.stderr


SIGNAL_BODY = r'''
import signal
signal.signal(signal.SIGALRM, lambda *a: None)
signal.siginterrupt(signal.SIGALRM, False)         # SA_RESTART, as C and Go programs do
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
errs = {}
for i in range(600):
    for what, fn in (("excl", lambda: os.close(os.open("x%d" % i, os.O_WRONLY | os.O_CREAT | os.O_EXCL))),
                     ("mkdir", lambda: os.mkdir("d%d" % i)),
                     ("rename", lambda: os.rename("x%d" % i, "y%d" % i))):
        try:
            fn()
        except OSError as e:
            errs[what + ":" + en(e.errno)] = errs.get(what + ":" + en(e.errno), 0) + 1
signal.setitimer(signal.ITIMER_REAL, 0)
R["errors"] = errs
R["files"] = len([n for n in os.listdir(".") if n.startswith("y")])
'''


def test_signals_neither_repeat_nor_starve_mediated_calls(root_sandbox):
    """A timer signal every 200 us (shorter than a mediated call): with
    WAIT_KILLABLE_RECV a call the supervisor took is finished before the signal
    is handled, so it is never restarted after taking effect (a spurious EEXIST
    or ENOENT) and never starved by endless restarts."""
    p, r = root_sandbox.probe(SIGNAL_BODY, timeout=120)
    assert r is not None, p.stderr
    assert r == {"errors": {}, "files": 600}, (r, p.stderr)


def test_move_in_rule_where_landlock_allows_the_rename(confine_bin, test_user):
    """No mount namespace: Landlock and the kernel let a rename from beside the
    workdir into it succeed (the file control), so the EXDEV for a directory is
    the broker's own rule; without it the directory's unjudged .envrc would land
    in the workdir. A `write:` grant beside the workdir is a protected root of its
    own (protect/roots.py), judged by its own guard: a directory from it is refused
    with EXDEV. A grant above the workdir is one root holding the workdir: the
    directory made beside the workdir had its `.envrc` judged (held), and moves in
    without it."""
    import tempfile

    from conftest import Sandbox, make_workdir
    top = make_workdir(test_user)
    wd, out = os.path.join(top, "wd"), os.path.join(top, "out")
    for d in (wd, out):
        os.mkdir(d)
        os.chown(d, test_user.pw_uid, test_user.pw_gid)
    body = (f'O = "{out}"\n'
            'opened(O + "/f", os.O_WRONLY | os.O_CREAT)\n'
            'os.mkdir(O + "/d"); opened(O + "/d/.envrc", os.O_WRONLY | os.O_CREAT)\n'
            'attempt("file", lambda: os.rename(O + "/f", "f"))\n'
            'attempt("dir", lambda: os.rename(O + "/d", "d"))\n')
    try:
        for grant, moved in ((out, "EXDEV"), (top, "ok")):
            prof = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
            prof.write(f"extends: default\nfilesystem:\n  write: [{grant}]\n")
            prof.close()
            os.chmod(prof.name, 0o644)
            try:
                box = Sandbox("root", test_user, wd).without_namespaces()
                p, r = box.probe(body, None, "-p", prof.name)
            finally:
                os.unlink(prof.name)
            assert r == {"file": "ok", "dir": moved}, (grant, r, p.stderr)
            assert not os.path.lexists(os.path.join(wd, "d", ".envrc"))
            assert os.path.isdir(os.path.join(wd, "d")) == (moved == "ok")
            for n in ("f", "d"):
                subprocess.run(["rm", "-rf", os.path.join(wd, n), os.path.join(out, n)],
                               check=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_another_mount_of_the_workdir_is_guarded_too(confine_bin, test_user):
    """The workdir also reachable through a bind mount elsewhere, no mount
    namespace: Landlock rules follow inodes, so the other path is writable;
    the guard judges names under every path to the workdir."""
    import tempfile

    from conftest import Sandbox, make_workdir
    wd = make_workdir(test_user)
    alias = tempfile.mkdtemp(prefix="confine-alias-", dir="/tmp")
    subprocess.run(["mount", "--bind", wd, alias], check=True)
    try:
        box = Sandbox("root", test_user, wd).without_namespaces()
        body = (f'A = "{alias}"\n'
                'attempt("plain", lambda: opened(A + "/plain", os.O_WRONLY | os.O_CREAT))\n'
                'attempt("envrc", lambda: opened(A + "/.envrc", os.O_WRONLY | os.O_CREAT))\n'
                'attempt("mcp", lambda: os.symlink("plain", A + "/.mcp.json"))\n')
        p, r = box.probe(body)
        # .envrc judged as the workdir's: held, not made there (nor through the alias)
        assert r == {"plain": "ok", "envrc": "ok", "mcp": "EACCES"}, (r, p.stderr)
        assert not os.path.exists(os.path.join(wd, ".envrc"))
        assert "confine:   held .envrc (file" in p.stderr, p.stderr
    finally:
        subprocess.run(["umount", alias])
        os.rmdir(alias)
        shutil.rmtree(wd, ignore_errors=True)


def test_target_of_a_protected_symlink_is_guarded(sandbox):
    """`.git/hooks -> ../githooks` existing at start, no mount namespace: the
    snapshot records githooks/ as protected, and the guard refuses new hooks
    there (a pattern alone would only see the name githooks)."""
    wd = sandbox.workdir
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", wd], check=True, env=env)
    hooks = os.path.join(wd, ".git", "hooks")
    subprocess.run(["rm", "-rf", hooks], check=True)
    os.mkdir(os.path.join(wd, "githooks"))
    os.symlink("../githooks", hooks)
    subprocess.run(["chown", "-Rh", f"{sandbox.pw.pw_uid}:{sandbox.pw.pw_gid}", wd], check=True)
    box = sandbox.without_namespaces()
    p, r = box.probe('attempt("hook", lambda: opened("githooks/pre-commit", os.O_WRONLY | os.O_CREAT))\n'
                     'attempt("plain", lambda: opened("plain", os.O_WRONLY | os.O_CREAT))')
    assert r == {"hook": "EACCES", "plain": "ok"}, (r, p.stderr)
    assert not os.path.exists(os.path.join(wd, "githooks", "pre-commit"))


BYPASS_BODY = r'''
O = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
def at(d, name, flags=O):
    os.close(os.open(name, flags, 0o644, dir_fd=d))
# A live directory whose name reads like a deleted one in /proc/self/fd.
os.mkdir("x (deleted)")
attempt("deleted-suffix .envrc", lambda: opened("x (deleted)/.envrc", O))
attempt("deleted-suffix plain", lambda: opened("x (deleted)/plain", O))
attempt("deleted-suffix .ENVRC", lambda: opened("x (deleted)/.ENVRC", O))
attempt("deleted-suffix mkdir .vscode", lambda: os.mkdir("x (deleted)/.vscode"))
def prepared_git():
    os.makedirs("x (deleted)/prep/hooks")
    opened("x (deleted)/prep/hooks/post-checkout", O, 0o755)
    os.rename("x (deleted)/prep", "x (deleted)/.git")
attempt("deleted-suffix prepared .git", prepared_git)
def moved_out():
    opened("x (deleted)/innocent", O)
    os.rename("x (deleted)/innocent", ".mcp.json")
attempt("deleted-suffix rename to .mcp.json", moved_out)
# Deeper than PATH_MAX: readlink of the directory fails, so no path to parse.
d = os.open(".", os.O_PATH)
for i in range(24):
    os.mkdir("d" * 200, dir_fd=d)
    n = os.open("d" * 200, os.O_PATH | os.O_DIRECTORY, dir_fd=d)
    os.close(d)
    d = n
try:
    os.readlink("/proc/self/fd/%d" % d); R["deep readlink"] = "ok"
except OSError as e:
    R["deep readlink"] = en(e.errno)
attempt("long .envrc", lambda: at(d, ".envrc"))
attempt("long .Envrc", lambda: at(d, ".Envrc"))
attempt("long plain", lambda: at(d, "plain"))
attempt("long mkdir .git", lambda: os.mkdir(".git", dir_fd=d))
attempt("long hook", lambda: (os.mkdir(".git/hooks", dir_fd=d), at(d, ".git/hooks/pre-commit"))[-1])
def long_rename():
    at(d, "innocent")
    os.rename("innocent", ".envrc", src_dir_fd=d, dst_dir_fd=d)
attempt("long rename to .envrc", long_rename)
attempt("long rename out", lambda: os.rename("innocent", "moved", src_dir_fd=d, dst_dir_fd=d))
os.chdir("/proc/self/fd/%d" % d)
attempt("long cwd .mcp.json", lambda: opened(".mcp.json", O))
attempt("long cwd plain", lambda: opened("plain2", O))
'''


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_names_the_guard_cannot_read_back_are_still_judged(sandbox, layers):
    """Issue 10 item 1: a parent directory named `x (deleted)` or deeper than
    PATH_MAX made the broker's path lookup fail, and the guard then allowed
    the call. Positions are now found by descriptor."""
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    p, r = box.probe(BYPASS_BODY, timeout=90)
    assert r is not None, p.stderr
    assert r.pop("deep readlink") == "ENAMETOOLONG", r
    for k in ("deleted-suffix plain", "long plain", "long mkdir .git", "long cwd plain",
              "long rename out"):
        assert r.pop(k) == "ok", (k, r, p.stderr)        # the controls: ordinary names work
    # new protected files and directories are held (the walk below: not made here)
    for k in ("deleted-suffix .envrc", "deleted-suffix .ENVRC", "deleted-suffix mkdir .vscode",
              "long .envrc", "long .Envrc", "long cwd .mcp.json"):
        assert r.pop(k) == "ok", (k, r, p.stderr)
    bad = {k: v for k, v in r.items() if v != "EACCES"}
    assert not bad, (bad, p.stderr)
    found = []
    for dirpath, dirnames, filenames in os.walk(box.workdir):
        for n in filenames + dirnames:
            if "/prep" in dirpath:
                continue                    # prepared, but never renamed to .git
            if n.casefold() in (".envrc", ".mcp.json", ".vscode", "post-checkout", "pre-commit") \
                    or (n == ".git" and dirpath.endswith("(deleted)")):
                found.append(os.path.join(dirpath, n)[-80:])
    assert not found, found


FLOOD_BODY = r'''
import sys
d = os.open(".", os.O_PATH)
for i in range(9):                         # long reasons: each denial names a ~1.8 kB path
    os.mkdir("l" * 200, dir_fd=d)
    n = os.open("l" * 200, os.O_PATH | os.O_DIRECTORY, dir_fd=d); os.close(d); d = n
os.mkdir(".git", dir_fd=d); os.mkdir(".git/hooks", dir_fd=d)
h = os.open(".git/hooks", os.O_PATH | os.O_DIRECTORY, dir_fd=d)
def flood(a, b):
    refused = 0
    for i in range(a, b):
        try:
            os.close(os.open("hook-%06d" % i, os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=h))
        except PermissionError:
            refused += 1
    return refused
R["first"] = flood(0, 200)
print("phase1", flush=True); sys.stdin.readline()
R["second"] = flood(200, 8200)
print("phase2", flush=True); sys.stdin.readline()
'''


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))


def test_distinct_denials_do_not_grow_the_supervisor(sandbox):
    """Issue 10 item 11: every distinct denial was kept in a set for the whole
    run (8,000 refused hooks with long names: some 30 MB). Only the shown ones
    are kept now, the rest counted."""
    import tempfile

    from conftest import PY, last_json, probe_code
    errf = tempfile.TemporaryFile("w+")       # 100 long reports would fill a pipe
    proc = sandbox.popen([PY, "-c", probe_code(FLOOD_BODY)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=errf, text=True)
    try:
        assert proc.stdout.readline().strip() == "phase1"
        before = _rss_kb(proc.pid)              # env and setpriv exec confine: its pid
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "phase2"
        after = _rss_kb(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.flush()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    errf.seek(0)
    err = errf.read()
    r = last_json(out)
    assert r == {"first": 200, "second": 8000}, (r, err[-2000:])   # all refused, and reported:
    assert err.count("confine: denied: ") == 100 and "no more are shown" in err
    assert after - before < 6000, f"supervisor grew {after - before} kB over 8000 denials"

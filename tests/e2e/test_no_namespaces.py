"""Hosts without user namespaces (containers, Ubuntu's restriction, confine in
confine): the mount namespace's guarantees hold by their replacements, with the
default profile and no flag.

CONFINE_TEST_NO_NAMESPACES=1 makes confine believe the namespaces cannot be
made; `_docker_like` goes further and runs confine under a parent seccomp
filter like Docker's default profile for a process without capabilities
(unshare, setns, clone with namespace flags and the mount family refused,
clone3 ENOSYS, pidfd_getfd, process_madvise and kcmp refused), so confine
finds out by itself, and the notification path works without pidfd_getfd.
Every refusal has a control: the same call inside the workdir works, and the
same call outside the sandbox works on the very file refused inside.
"""
from __future__ import annotations

import copy
import json
import os
import pty
import shutil
import stat
import subprocess

import pytest
from conftest import NO_NAMESPACES, PREFIX, PY, last_json, probe_code, write_owned


def _nons(box, knob=True):
    """The sandbox with namespaces unavailable (the test knob, or a parent
    filter: knob=False), and no flag: every guarantee is replaced."""
    sb = copy.copy(box)
    sb.opts = list(box.opts)
    sb.env = box.env + ([NO_NAMESPACES] if knob else [])
    return sb


META_BODY = r'''
import threading
f, d, wd = P["f"], P["dir"], os.getcwd()
AT_FDCWD, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH = -100, 0x100, 0x1000
NR = {"fchmodat2": 452, "setxattrat": 463, "utimensat": 280, "futimesat": 261}

def each(prefix, path):
    attempt(prefix + "chmod", lambda: os.chmod(path, 0o666))
    attempt(prefix + "chown", lambda: os.chown(path, os.getuid(), os.getgid()))
    attempt(prefix + "utime", lambda: os.utime(path, (0, 0)))
    attempt(prefix + "setxattr", lambda: os.setxattr(path, b"user.confine", b"1"))
    attempt(prefix + "removexattr", lambda: os.removexattr(path, b"user.keep"))
    attempt(prefix + "fchmodat2", lambda: sysc(NR["fchmodat2"], AT_FDCWD, path.encode(), 0o666, 0))

each("out ", f)
each("rel ", os.path.relpath(f))
dfd = os.open(d, os.O_PATH | os.O_DIRECTORY)
attempt("dirfd chmod", lambda: os.chmod(os.path.basename(f), 0o666, dir_fd=dfd))
attempt("dirfd utime", lambda: os.utime(os.path.basename(f), (0, 0), dir_fd=dfd))
attempt("dirfd chown", lambda: os.chown(os.path.basename(f), -1, os.getgid(), dir_fd=dfd))
attempt("dirfd empty_path", lambda: sysc(NR["fchmodat2"], dfd, b"", 0o777, AT_EMPTY_PATH))
fd = os.open(f, os.O_RDONLY)
attempt("fd fchmod", lambda: os.chmod(fd, 0o666))
attempt("fd fchown", lambda: os.chown(fd, -1, os.getgid()))
attempt("fd futimens", lambda: os.utime(fd, (0, 0)))
attempt("fd fsetxattr", lambda: os.setxattr(fd, b"user.confine", b"1"))
attempt("fd fremovexattr", lambda: os.removexattr(fd, b"user.keep"))
attempt("fd utimensat NULL", lambda: sysc(NR["utimensat"], fd, None, None, 0))
attempt("fd futimesat NULL", lambda: sysc(NR["futimesat"], fd, None, None))
# setxattrat(dfd, path, flags, name, &{value, size, flags}, 16)
val = ctypes.create_string_buffer(b"1")
args = struct.pack("<QII", ctypes.addressof(val), 1, 0)
attempt("setxattrat", lambda: sysc(NR["setxattrat"], AT_FDCWD, f.encode(), 0, b"user.confine",
                                   ctypes.create_string_buffer(args, 16), 16))
opath = os.open(f, os.O_PATH)
attempt("O_PATH fchmod", lambda: os.chmod(opath, 0o666))
attempt("O_PATH via proc", lambda: os.chmod("/proc/self/fd/%d" % opath, 0o666))
# a symlink in the workdir pointing out: followed calls reach the file outside;
# the symlink itself is the agent's (lchown, utime without following: allowed)
os.symlink(f, "link-out")
each("symlink ", "link-out")
attempt("symlink lchown itself", lambda: os.lchown("link-out", os.getuid(), os.getgid()))
attempt("symlink lutime itself", lambda: os.utime("link-out", (5, 5), follow_symlinks=False))
# a hard link made into the workdir before the run (the same inode as outside)
each("hardlink ", "hard")
# the agent's own files (control)
open("mine", "w").write("x")
os.setxattr("mine", b"user.keep", b"1")
each("in ", "mine")
ifd = os.open("mine", os.O_RDONLY)
attempt("in fd fchmod", lambda: os.chmod(ifd, 0o640))
attempt("in fd futimens", lambda: os.utime(ifd, (7, 7)))
attempt("in fd fsetxattr", lambda: os.setxattr(ifd, b"user.fd", b"1"))
attempt("in dirfd empty_path", lambda: sysc(NR["fchmodat2"], os.open(".", os.O_PATH), b"", 0o755,
                                            AT_EMPTY_PATH))
attempt("in tmp chmod", lambda: (open(os.environ["TMPDIR"] + "/t", "w").close(),
                                 os.chmod(os.environ["TMPDIR"] + "/t", 0o600))[-1])
R["in mode"] = oct(os.stat("mine").st_mode & 0o7777)
R["in mtime"] = os.stat("mine").st_mtime
# a rename race: "swap" is exchanged between the agent's file and a symlink to
# the file outside while another thread chmods it: never the file outside
os.symlink(f, "evil")
open("swap", "w").close()
stop = []
def flip():
    while not stop:
        libc.renameat2(AT_FDCWD, b"swap", AT_FDCWD, b"evil", 2)
t = threading.Thread(target=flip)
t.start()
seen = set()
for i in range(300):
    try:
        os.chmod("swap", 0o666)
        seen.add("ok")
    except OSError as e:
        seen.add(en(e.errno))
stop.append(1)
t.join()
R["race"] = sorted(seen)
# the same with a directory on the way: "dswap" flips between the agent's own
# directory and a symlink to the directory outside, while "dswap/victim" is chmodded
os.mkdir("dswap")
open("dswap/victim", "w").close()
os.symlink(d, "dlink")
stop.clear()
t = threading.Thread(target=lambda: [libc.renameat2(AT_FDCWD, b"dswap", AT_FDCWD, b"dlink", 2)
                                     for _ in iter(lambda: bool(stop), True)])
t.start()
seen = set()
for i in range(300):
    try:
        os.chmod("dswap/victim", 0o666)
        seen.add("ok")
    except OSError as e:
        seen.add(en(e.errno))
stop.append(1)
t.join()
R["dir race"] = sorted(seen)
'''


def _victim(sandbox, outside_dir):
    f = write_owned(os.path.join(outside_dir, "victim"), "keep", sandbox.agent, mode=0o600)
    os.setxattr(f, "user.keep", b"1")
    os.utime(f, (1_000_000, 1_000_000))
    linked = write_owned(os.path.join(outside_dir, "linked"), "keep", sandbox.agent, mode=0o600)
    os.setxattr(linked, "user.keep", b"1")
    hard = os.path.join(sandbox.workdir, "hard")
    if os.path.lexists(hard):
        os.unlink(hard)
    os.link(linked, hard)
    return f


def _facts(f):
    out = []
    for p in (f, os.path.join(os.path.dirname(f), "linked")):
        st = os.stat(p)
        out.append((stat.S_IMODE(st.st_mode), st.st_mtime, st.st_uid, st.st_gid,
                    sorted(os.listxattr(p))))
    return out


def _clean(workdir):
    for n in ("link-out", "hard", "mine", "evil", "swap", "dlink", "dswap"):
        p = os.path.join(workdir, n)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.unlink(p)


OUT_KEYS = ("out ", "rel ", "dirfd ", "fd ", "setxattrat", "O_PATH via proc", "symlink chmod",
            "symlink chown", "symlink utime", "symlink setxattr", "symlink removexattr",
            "symlink fchmodat2", "hardlink ")


def _meta_check(box, sandbox, outside_dir, env=()):
    f = _victim(sandbox, outside_dir)
    before = _facts(f)
    try:
        p, r = box.probe(META_BODY, {"f": f, "dir": outside_dir}, "--read", outside_dir,
                         env_extra=env)
        assert r is not None, (p.returncode, p.stderr[-3000:])
        assert p.returncode == 0, p.stderr[-3000:]
        after = _facts(f)
    finally:
        _clean(sandbox.workdir)
    assert after == before, f"the file outside changed: {before} -> {after}; {r}"
    out = {k: v for k, v in r.items() if k.startswith(OUT_KEYS)}
    assert len(out) >= 36, out
    wrong = {k: v for k, v in out.items() if v not in ("EROFS", "EACCES")}
    assert not wrong, wrong
    assert r["fd utimensat NULL"] == "EROFS" and r["fd fchmod"] == "EROFS", r
    assert r["out chmod"] == "EROFS" and r["symlink chmod"] == "EROFS", r
    assert r["hardlink chmod"] == "EACCES", r          # another name of an outside file
    assert r["O_PATH fchmod"] == "EBADF", r            # as the kernel answers
    inside = {k: v for k, v in r.items() if k.startswith("in ") and k not in ("in mode", "in mtime")}
    assert inside == {k: "ok" for k in inside} and len(inside) >= 11, inside
    assert r["in mode"] == "0o640" and r["in mtime"] == 7, r
    assert r["symlink lchown itself"] == "ok" and r["symlink lutime itself"] == "ok", r
    assert "ok" in r["race"] and set(r["race"]) <= {"ok", "EROFS", "ENOENT"}, r["race"]
    assert set(r["dir race"]) <= {"ok", "EROFS", "ENOENT", "ENOTDIR"}, r["dir race"]
    return f


def test_metadata_outside_the_writable_paths_refused(sandbox, outside_dir):
    """No mount namespace: chmod, chown, utime and xattr calls on a file of the
    agent's outside the workdir are refused (by path, relative path, dirfd,
    descriptor, O_PATH through /proc, a symlink pointing out, a hard link into
    the workdir, a rename race), nothing changes; the same calls on its own
    files work. Control: outside the sandbox the very same calls work."""
    f = _meta_check(_nons(sandbox), sandbox, outside_dir)
    _, out = sandbox.outside_probe("attempt('chmod', lambda: os.chmod(P['f'], 0o644))\n"
                                   "attempt('utime', lambda: os.utime(P['f'], (0, 0)))\n"
                                   "attempt('xattr', lambda: os.setxattr(P['f'], b'user.x', b'1'))\n",
                                   {"f": f})
    assert out == {"chmod": "ok", "utime": "ok", "xattr": "ok"}, out


def test_runs_with_the_default_profile_and_no_flag(sandbox):
    """Only the namespaces missing: the default profile runs with no flag for the
    mount namespace (only the pid-namespace placeholder is accepted, and it is the
    only missing entry), and --dry-run names the replacement behind each part."""
    nons = _nons(sandbox)
    p = nons.run(["true"])
    assert p.returncode == 0, p.stderr
    assert "cannot enforce" not in p.stderr, p.stderr
    assert "degraded: NOT enforced: mount_namespace" not in p.stderr, p.stderr
    d = json.loads(nons.run(["true"], "--dry-run", "--json").stdout)
    mech = d["mechanisms"]
    assert mech["mount_namespace.read_only_host"].startswith("broker mediation"), mech
    assert mech["mount_namespace.private_shm"].startswith("no /dev/shm grant"), mech
    assert mech["mount_namespace.private_pts"].startswith("Landlock device rules"), mech
    assert mech["mount_namespace.protected_paths"].startswith("name guard"), mech
    assert d["missing"] == [], d["missing"]       # nothing refused: no flag needed
    calls = next(s for s in d["steps"] if s["name"] == "seccomp_notify")["calls"]
    assert {"chmod", "fchownat", "utimensat", "fsetxattr", "removexattrat"} <= set(calls)
    # with the namespace, none of them is notified (the read-only host refuses)
    full = json.loads(sandbox.run(["true"], "--dry-run", "--json").stdout)
    calls = next(s for s in full["steps"] if s["name"] == "seccomp_notify")["calls"]
    assert not {"chmod", "fchmod", "utimensat", "setxattr"} & set(calls), calls


DEV_BODY = r'''
attempt("shm create", lambda: opened("/dev/shm/confine-nons-%d" % os.getpid(), os.O_CREAT | os.O_WRONLY))
attempt("shm list", lambda: os.listdir("/dev/shm") and None)
attempt("other pty", lambda: opened(P["pty"], os.O_RDWR | os.O_NOCTTY))
attempt("ptmx", lambda: opened("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
'''


def test_dev_shm_and_other_terminals_refused(sandbox):
    """No mount namespace: the host's /dev/shm is not granted (it is shared with
    every process of the user) and no other terminal of the user can be opened;
    a new pseudo-terminal still can. Control: outside, the same identity opens
    both."""
    master, slave = pty.openpty()
    name = os.ttyname(slave)
    os.chown(name, sandbox.agent.pw_uid, -1)
    try:
        p, r = _nons(sandbox).probe(DEV_BODY, {"pty": name})
        assert r is not None, p.stderr
        assert r["shm create"] == "EACCES" and r["other pty"] == "EACCES", r
        assert r["ptmx"] == "ok", r
        _, out = sandbox.outside_probe(DEV_BODY, {"pty": name})
        assert out["shm create"] == "ok" and out["other pty"] == "ok", out
    finally:
        os.close(master)
        os.close(slave)
        for n in os.listdir("/dev/shm"):
            if n.startswith("confine-nons-"):
                os.unlink(os.path.join("/dev/shm", n))


# --- a parent seccomp filter like Docker's default profile, without capabilities

DOCKER_LIKE = r'''
import errno, os, sys
import pyseccomp as sc
f = sc.SyscallFilter(sc.ALLOW)
for name in ("unshare", "setns", "mount", "umount2", "pivot_root", "move_mount", "open_tree",
             "fsopen", "fsmount", "fspick", "fsconfig", "mount_setattr",
             "pidfd_getfd", "process_madvise", "kcmp"):
    f.add_rule(sc.ERRNO(errno.EPERM), name)
f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
    f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
f.load()
os.execv(sys.argv[1], sys.argv[1:])
'''


class _DockerLike:
    """Runs the sandbox's confine command under DOCKER_LIKE (no test knob)."""

    def __init__(self, box):
        self.box = box
        self.last: subprocess.CompletedProcess | None = None

    def probe(self, body, params, *opts, env_extra=()):
        cmd = self.box.exec_cmd([PY, "-c", probe_code(body, params)], *opts, env_extra=env_extra)
        i = cmd.index(os.path.join(PREFIX, "bin", "confine"))
        cmd[i:i] = [os.path.join(PREFIX, "bin", "python"), "-c", DOCKER_LIKE,
                    os.path.join(PREFIX, "bin", "python")]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=self.box.workdir)
        self.last = p
        return p, last_json(p.stdout)


UNIX_BODY = r'''
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
attempt("connect", lambda: s.connect("nope.sock"))
attempt("mkdirat dirfd", lambda: os.mkdir("sub", dir_fd=os.open(".", os.O_PATH)))
attempt("create via dirfd", lambda: os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600,
                                                     dir_fd=os.open("sub", os.O_PATH))))
attempt("protected via dirfd", lambda: os.close(os.open(".envrc", os.O_CREAT | os.O_WRONLY, 0o600,
                                                        dir_fd=os.open(".", os.O_PATH))))
R["protected in workdir"] = os.path.lexists(".envrc")
attempt("pidfd_getfd", lambda: sysc(438, os.pidfd_open(os.getpid()), 0, 0))
'''


def test_under_a_docker_like_parent_filter(sandbox, outside_dir):
    """Under a parent filter like Docker's (namespaces and pidfd_getfd refused),
    with no test knob and no flag: confine finds out by itself, runs the default
    profile, the metadata calls are judged the same, dirfds reach the broker
    through /proc, and a mediated socket call is performed on a new socket
    (mediation/sockfd.py: here a connect to a name that does not exist in the
    workdir gets the kernel's ENOENT; tests/e2e/test_sockets_without_getfd.py)."""
    box = _DockerLike(_nons(sandbox, knob=False))
    p, r = box.probe(UNIX_BODY, {})
    assert r is not None, (p.returncode, p.stderr[-3000:])
    assert r["pidfd_getfd"] == "EPERM", r          # the parent filter holds inside too
    assert r["mkdirat dirfd"] == "ok" and r["create via dirfd"] == "ok", r
    # a new protected name is held (protect/held.py), never in the workdir
    assert r["protected via dirfd"] == "ok" and r["protected in workdir"] is False, r
    assert not os.path.lexists(os.path.join(sandbox.workdir, ".envrc"))
    assert r["connect"] == "ENOENT", (r, p.stderr)
    assert "cannot enforce" not in p.stderr, p.stderr
    box.probe("", {}, "--dry-run", "--json")          # the plan, under the same filter
    d = json.loads(box.last.stdout)
    assert "pidfd_getfd refused" in d["mechanisms"]["seccomp_notify"], d["mechanisms"]
    assert not d["missing"] or not [m for m in d["missing"]
                                    if m["feature"].startswith("mount_namespace")], d["missing"]
    _clean(sandbox.workdir)
    _meta_check(box, sandbox, outside_dir)


@pytest.fixture(autouse=True)
def _tidy(sandbox):
    yield
    for n in ("sub", ".envrc"):
        p = os.path.join(sandbox.workdir, n)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.unlink(p)


GUARD_BODY = r'''
attempt("chmod .envrc", lambda: os.chmod(".envrc", 0o777))
attempt("utime .envrc", lambda: os.utime(".envrc", (0, 0)))
attempt("setxattr .envrc", lambda: os.setxattr(".envrc", b"user.x", b"1"))
attempt("fchmod .envrc", lambda: os.chmod(os.open(".envrc", os.O_RDONLY), 0o777))
os.rename(".envrc", "moved")      # allowed (the exit check puts it back)
attempt("chmod it renamed away", lambda: os.chmod("moved", 0o777))
attempt("chmod via /proc/self/root", lambda: os.chmod("/proc/self/root" + P["f"], 0o777))
attempt("chmod via /proc/self/cwd/..", lambda: os.chmod("/proc/self/cwd/../" + os.path.relpath(P["f"], ".."), 0o777))
open("plain", "w").close()
attempt("xattr name too long", lambda: os.setxattr("plain", b"user." + b"n" * 300, b"1"))
attempt("xattr value too large", lambda: os.setxattr("plain", b"user.big", b"v" * 70000))
attempt("xattr trusted", lambda: os.setxattr("plain", b"trusted.x", b"1"))
attempt("chmod plain", lambda: os.chmod("plain", 0o600))
attempt("chmod missing", lambda: os.chmod("nope", 0o600))
attempt("chmod empty", lambda: os.chmod("", 0o600))
attempt("chmod setuid own", lambda: os.chmod("plain", 0o4755))
attempt("chmod +x a hook", lambda: os.chmod(".git/hooks/pre-commit", 0o755))
attempt("utime hooks dir", lambda: os.utime(".git/hooks", (9, 9)))
os.makedirs("n/.git/hooks")        # a repository made inside, as git init does
open("n/.git/hooks/new.sample", "w").close()
attempt("chmod +x a sample", lambda: os.chmod("n/.git/hooks/new.sample", 0o755))
attempt("utime new hooks dir", lambda: os.utime("n/.git/hooks", (9, 9)))
'''


def test_protected_names_and_odd_calls(sandbox, outside_dir):
    """No mount namespace: a protected workdir name (.envrc, present at start)
    keeps its mode, times and xattrs (name guard; by inode once renamed away);
    paths through /proc reach the same judgment; the kernel's own limits hold
    (ERANGE, E2BIG, EPERM for trusted.*, ENOENT) and a plain file of the
    agent's changes (control)."""
    envrc = write_owned(os.path.join(sandbox.workdir, ".envrc"), "echo hi\n", sandbox.agent)
    hooks = os.path.join(sandbox.workdir, ".git", "hooks")
    os.makedirs(hooks)
    for d in (os.path.dirname(hooks), hooks):
        os.chown(d, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    hook = write_owned(os.path.join(hooks, "pre-commit"), "#!/bin/sh\n", sandbox.agent)
    f = write_owned(os.path.join(outside_dir, "victim"), "keep", sandbox.agent, mode=0o600)
    before = (os.stat(envrc).st_mode, os.stat(f).st_mode)
    try:
        p, r = _nons(sandbox).probe(GUARD_BODY, {"f": f}, "--read", outside_dir)
        assert r is not None, p.stderr[-3000:]
        assert (os.stat(envrc).st_mode, os.stat(f).st_mode) == before
        assert stat.S_IMODE(os.stat(hook).st_mode) == 0o644
    finally:
        for n in (".envrc", "plain", "moved"):
            if os.path.lexists(os.path.join(sandbox.workdir, n)):
                os.unlink(os.path.join(sandbox.workdir, n))
        for n in (".git", "n"):
            shutil.rmtree(os.path.join(sandbox.workdir, n), ignore_errors=True)
    assert {k: r[k] for k in ("chmod .envrc", "utime .envrc", "setxattr .envrc", "fchmod .envrc",
                              "chmod it renamed away")} == dict.fromkeys(
        ("chmod .envrc", "utime .envrc", "setxattr .envrc", "fchmod .envrc",
         "chmod it renamed away"), "EACCES"), r
    assert r["chmod via /proc/self/root"] == "EROFS", r
    assert r["chmod via /proc/self/cwd/.."] == "EROFS", r
    assert r["xattr name too long"] == "ERANGE" and r["xattr value too large"] == "E2BIG", r
    assert r["xattr trusted"] == "EPERM" and r["chmod missing"] == "ENOENT", r
    assert r["chmod empty"] == "ENOENT", r
    assert r["chmod plain"] == "ok" and r["chmod setuid own"] == "ok", r
    # a hook present at start may not become executable, nor its directory change;
    # what git init may make may (inert *.sample hooks, a new hooks directory)
    assert r["chmod +x a hook"] == r["utime hooks dir"] == "EACCES", r
    assert r["chmod +x a sample"] == "ok" and r["utime new hooks dir"] == "ok", r


GRANT_BODY = r'''
d = P["dir"]
attempt("chmod granted", lambda: os.chmod(d + "/w", 0o640))
attempt("utime granted", lambda: os.utime(d + "/w", (3, 3)))
attempt("chmod granted dir", lambda: os.chmod(d, 0o750))
attempt("chmod read_only entry", lambda: os.chmod(d + "/ro.sh", 0o777))
attempt("setxattr read_only entry", lambda: os.setxattr(d + "/ro.sh", b"user.x", b"1"))
attempt("chmod in read_only dir", lambda: os.chmod(d + "/rodir/f", 0o777))
attempt("chmod secret", lambda: os.chmod(d + "/secret", 0o777))
'''


def test_write_grants_minus_read_only_entries_and_secrets(sandbox, outside_dir):
    """No mount namespace: a write grant outside the workdir allows metadata
    changes, except on its read-only entries (a file, a directory's contents)
    and secrets carved out of it. Control: the granted file changes."""
    for n in ("w", "ro.sh", "secret"):
        write_owned(os.path.join(outside_dir, n), "x", sandbox.agent, mode=0o600)
    os.mkdir(os.path.join(outside_dir, "rodir"))
    os.chown(os.path.join(outside_dir, "rodir"), sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    write_owned(os.path.join(outside_dir, "rodir", "f"), "x", sandbox.agent, mode=0o600)
    prof = os.path.join(sandbox.workdir, "mine.yaml")
    with open(prof, "w") as f:
        f.write(f"extends: default\nfilesystem:\n  write:\n    - {outside_dir}\n"
                f"  read_only:\n    - {outside_dir}/ro.sh\n    - {outside_dir}/rodir\n"
                f"  deny:\n    - {outside_dir}/secret\n")
    os.chmod(prof, 0o644)
    try:
        p, r = _nons(sandbox).probe(GRANT_BODY, {"dir": outside_dir}, "-p", prof)
    finally:
        os.unlink(prof)
    assert r is not None, p.stderr[-3000:]
    assert r["chmod granted"] == r["utime granted"] == "ok", r
    # the grant is carved around its read-only entries: the directory itself is not
    # writable then (as on the read-only host view of a mount namespace)
    assert r["chmod granted dir"] == "EROFS", r
    assert stat.S_IMODE(os.stat(os.path.join(outside_dir, "w")).st_mode) == 0o640
    assert r["chmod read_only entry"] == r["setxattr read_only entry"] == "EROFS", r
    assert r["chmod in read_only dir"] == "EROFS", r
    assert r["chmod secret"] in ("EROFS", "EACCES"), r
    for n in ("ro.sh", "secret", "rodir/f"):
        assert stat.S_IMODE(os.stat(os.path.join(outside_dir, n)).st_mode) == 0o600, n


ATTR_BODY = r'''
open("flags", "w").close()
fd = os.open("flags", os.O_RDONLY)
flags = ctypes.c_long(0)
R["getflags"] = "ok" if libc.ioctl(fd, 0x80086601, ctypes.byref(flags)) == 0 else en(ctypes.get_errno())
R["setflags"] = "ok" if libc.ioctl(fd, 0x40086602, ctypes.byref(flags)) == 0 else en(ctypes.get_errno())
R["setflags high bits"] = ("ok" if libc.ioctl(fd, 0x40086602 | (1 << 32), ctypes.byref(flags)) == 0
                           else en(ctypes.get_errno()))
attr = ctypes.create_string_buffer(32)
R["file_setattr"] = sysc(469, -100, b"flags", attr, 32, 0)
'''


def test_inode_flag_calls_refused(sandbox):
    """No mount namespace: FS_IOC_SETFLAGS (chattr) and file_setattr are refused
    (EPERM), even on the agent's own file and with high bits set in the request
    (the kernel reads 32 bits). Control: outside the sandbox the same calls are
    answered by the filesystem."""
    try:
        p, r = _nons(sandbox).probe(ATTR_BODY, {})
        assert r is not None, p.stderr[-2000:]
        _, out = sandbox.outside_probe(ATTR_BODY, {})
    finally:
        if os.path.exists(os.path.join(sandbox.workdir, "flags")):
            os.unlink(os.path.join(sandbox.workdir, "flags"))
    assert r["setflags"] == r["setflags high bits"] == r["file_setattr"] == "EPERM", r
    assert out["file_setattr"] != "EPERM" or out["setflags"] != "EPERM", out
    assert r["getflags"] == out["getflags"], (r, out)

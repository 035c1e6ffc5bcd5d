"""The probe battery: real attempts made from inside the sandbox.

This file is shipped as *text*: the supervisor runs it with
`python3 -I -S -c <this source> <config json>` inside exactly the sandbox
`confine exec` builds, because the agent may run as another user who cannot
read confine's installation. So it must stay self-contained: standard library
only, Python 3.8 syntax, no imports from confine.

Every attempt is harmless. It either acts on targets the probe created itself
(a file, a socket, a listener, a process outside the sandbox), or uses
arguments the kernel rejects after its permission checks (a bad reboot magic,
a nonexistent swap file, settimeofday(NULL, NULL), an ioctl aimed at
/dev/null), or opens something and closes it without writing (a disk, an rc
file). Calls that change the calling process (unshare, chroot, personality,
setns, raw clone) run in a forked child that exits at once.

Output: one JSON document on stdout. For each attempt: result "possible",
"blocked", "skipped" or "error"; what was seen (errno name, signal, "ok");
the mechanism that stopped it, worked out from the config the supervisor
passes (seccomp rules, Landlock ABI) and from facts read here (DAC through
access(2), which Landlock does not restrict; capabilities from
/proc/self/status).
"""
import ctypes
import errno
import json
import mmap
import os
import signal
import socket
import stat
import struct
import sys
import time
import traceback

CFG = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
NR = CFG.get("nr", {})
CONFINED = bool(CFG.get("confined"))
LL_ABI = int(CFG.get("landlock_abi", 0)) if CONFINED else 0
LL = LL_ABI > 0
SCOPED = set(CFG.get("scoped", [])) if CONFINED else set()
MEDIATION = bool(CFG.get("unix_mediation")) and CONFINED
META = bool(CFG.get("meta_mediation")) and CONFINED   # no mount namespace: the broker judges
# An exclusive workdir (policy/workdir_mode.py): no call in it is judged while the agent
# runs; a new protected name must be gone after the exit check (run.py looks then)
EXCLUSIVE = bool(CFG.get("exclusive")) and CONFINED
# The egress gateway runs and the supervisor rewrites every IPv4/IPv6 destination beyond
# the agent's loopback (mediation/inet.py): TCP to the gateway, port 53 to confine's DNS
# server, other UDP refused (EACCES); a destination no rule allows: ECONNREFUSED.
ROUTED = bool(CFG.get("inet_routed")) and CONFINED
RULES = CFG.get("seccomp", []) if CONFINED else []
ARCH = CFG.get("arch", os.uname().machine)
OUT = CFG.get("outside", {})
RAND = CFG.get("rand", "%x" % os.getpid())
WORKDIR = CFG.get("workdir") or os.getcwd()
HOME = CFG.get("home") or os.environ.get("HOME") or "/"
LIMITS = CFG.get("limits", {})            # the profile's, by name (None: unlimited)
LIMIT_HOW = CFG.get("limit_mechanisms", {})

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

U64 = (1 << 64) - 1
AT_FDCWD = -100
SIGCHLD = int(signal.SIGCHLD)
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
TIOCSTI, TIOCLINUX, TIOCSCTTY = 0x5412, 0x541C, 0x540E
CAP = {"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "KILL": 5, "SETUID": 7,
       "NET_RAW": 13, "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19,
       "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_TIME": 25, "MKNOD": 27, "SYSLOG": 34,
       "PERFMON": 38, "BPF": 39}


class Skip(Exception):
    pass


# ------------------------------------------------------------------ facts

def _status():
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except OSError:
        pass
    return out


STATUS = _status()


def _capmask(name):
    try:
        return int(STATUS.get(name, "0"), 16)
    except ValueError:
        return 0


CAP_EFF = _capmask("CapEff")


def has_cap(name):
    return bool(CAP_EFF >> CAP[name] & 1)


def ename(e):
    return errno.errorcode.get(e, str(e)) if e else "ok"


def _carg(v):
    if isinstance(v, int):
        v &= U64
        return ctypes.c_long(v - (1 << 64) if v >= 1 << 63 else v)
    if isinstance(v, bytes):
        return ctypes.c_char_p(v)
    return v


def sc(name, *args):
    """Raw system call by name (numbers come from the supervisor): (ret, errno)."""
    nr = NR.get(name)
    if nr is None:
        raise Skip("%s does not exist on %s" % (name, ARCH))
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[_carg(a) for a in args])
    return r, (ctypes.get_errno() if r == -1 else 0)


def seccomp_errnos(name, args):
    """The errnos the loaded seccomp rules that match this call return (several
    rules, possibly in stacked filters, may match one call)."""
    out = set()
    for sysc, err, matches in RULES:
        if sysc != name:
            continue
        ok = True
        for idx, op, value, mask in matches:
            a = (args[idx] if idx < len(args) else 0) & U64
            if op == "masked_eq":
                hit = a & mask == value
            else:
                hit = {"eq": a == value, "ne": a != value, "lt": a < value, "le": a <= value,
                       "gt": a > value, "ge": a >= value}[op]
            if not hit:
                ok = False
                break
        if ok:
            out.add(err)
    return out


def by_sys(err, call=None, cap=None, landlock=False, sysctl=None, scope=None):
    """Which layer returned err for a system call."""
    if call is not None and err in seccomp_errnos(call[0], call[1]):
        return "seccomp"
    if err == errno.ENOSYS:
        return "kernel (not built in)"
    if scope is not None and scope in SCOPED and err in (errno.EPERM, errno.EACCES):
        return "landlock (scope)"
    if landlock and LL and err in (errno.EPERM, errno.EACCES):
        return "landlock"
    if cap is not None and err in (errno.EPERM, errno.EACCES) and not has_cap(cap):
        return "capabilities"
    if sysctl and err in (errno.EPERM, errno.EACCES):
        return "sysctl " + sysctl
    return "kernel"


def dac_allows(path, mode):
    """DAC verdict via access(2) (Landlock does not restrict access(2))."""
    try:
        if os.path.lexists(path):
            return os.access(path, mode)
        parent = os.path.dirname(path.rstrip("/")) or "/"
        return os.access(parent, os.W_OK | os.X_OK)
    except OSError:
        return False


def by_fs(err, path, mode=os.W_OK):
    if err == errno.EXDEV:
        return "landlock (refer)" if LL else "kernel (cross-device)"
    if err == errno.EROFS:
        return "read-only mount"
    if err in (errno.EACCES, errno.EPERM):
        if dac_allows(path, mode):
            return "landlock" if LL else "kernel"
        if _read_only_mount(path):
            # a protected path bound read-only, whose name guard answered first
            return "read-only mount"
        return "DAC"
    if err == errno.ENOENT:
        return "not found"
    return "kernel"


def _read_only_mount(path):
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# -------------------------------------------------------------- results

def possible(detail=""):
    return {"result": "possible", "seen": "ok", "mechanism": None, "detail": detail}


def blocked(err, mechanism, detail=""):
    seen = err if isinstance(err, str) else ename(err)
    return {"result": "blocked", "seen": seen, "mechanism": mechanism, "detail": detail}


def skipped(why):
    return {"result": "skipped", "seen": None, "mechanism": None, "detail": why}


ATTEMPTS = []


def attempt(aid, title):
    def deco(fn):
        ATTEMPTS.append((aid, aid.split(".")[0], title, fn))
        return fn
    return deco


SANITY = []


def sanity(aid, title):
    def deco(fn):
        SANITY.append((aid, title, fn))
        return fn
    return deco


def in_child(fn):
    """Run fn() in a forked child; returns ("ret", value) or ("signal", signo).
    fn returns a JSON-able value; an OSError in the child is raised here again.
    The per-attempt timer interrupts a child that hangs; it is then killed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                val = fn()
            except Skip as e:
                val = {"skip": str(e)}
            except OSError as e:
                val = {"oserror": e.errno}
            os.write(w, json.dumps(val).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        data = b""
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
        _, st = os.waitpid(pid, 0)
        pid = 0
    finally:
        os.close(r)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        return "signal", os.WTERMSIG(st)
    val = json.loads(data.decode()) if data else None
    if isinstance(val, dict) and "skip" in val:
        raise Skip(val["skip"])
    if isinstance(val, dict) and "oserror" in val:
        raise OSError(val["oserror"], os.strerror(val["oserror"]))
    return "ret", val


def killed(signo):
    name = signal.Signals(signo).name
    if signo == signal.SIGSYS:
        return blocked(name, "seccomp", "the process was killed")
    return blocked(name, "kernel")


def child_call(name, *args):
    """A raw system call made in a forked child: ("ret", [ret, errno]) or ("signal", n)."""
    return in_child(lambda: list(sc(name, *args)))


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def fd_result(r, err, call, what, **why):
    """For calls that return a new descriptor on success."""
    if r >= 0:
        _close(r)
        return possible(what)
    return blocked(err, by_sys(err, call, **why))


# ------------------------------------------------------------ scratch

SCRATCH = None


def scratch():
    if SCRATCH is None:
        raise Skip("no writable scratch directory in the workdir")
    return SCRATCH


def _make_scratch():
    global SCRATCH
    name = CFG.get("scratch")
    if not name:
        return
    path = os.path.join(WORKDIR, name)
    try:
        os.mkdir(path, 0o700)
        SCRATCH = path
    except OSError:
        SCRATCH = None


def _tmpdir():
    return os.environ.get("TMPDIR") or "/tmp"


# ------------------------------------------------------------- sanity

@sanity("sanity.write_workdir", "create, write, rename and delete a file in the workdir")
def _s_write():
    p = os.path.join(WORKDIR, ".confine-probe-sanity-" + RAND)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"sanity\n")
    finally:
        os.close(fd)
    q = p + ".renamed"
    os.rename(p, q)
    with open(q) as f:
        if f.read() != "sanity\n":
            raise RuntimeError("read back differs")
    os.unlink(q)
    return "workdir " + WORKDIR


@sanity("sanity.write_tmp", "write a file in the private TMPDIR")
def _s_tmp():
    d = _tmpdir()
    p = os.path.join(d, ".confine-probe-sanity-" + RAND)
    with open(p, "w") as f:
        f.write("x")
    os.unlink(p)
    return "TMPDIR " + d


@sanity("sanity.read_usr", "read the system (/usr)")
def _s_read():
    names = os.listdir("/usr")
    exe = os.path.realpath(sys.executable)
    with open(exe, "rb") as f:
        if f.read(4) != b"\x7fELF":
            raise RuntimeError("%s is not an ELF file" % exe)
    return "%d entries in /usr, read %s" % (len(names), exe)


@sanity("sanity.exec", "execute a program (/usr/bin/true)")
def _s_exec():
    prog = "/usr/bin/true" if os.path.exists("/usr/bin/true") else "/bin/true"
    pid = os.posix_spawn(prog, [prog], dict(os.environ))
    _, st = os.waitpid(pid, 0)
    if not os.WIFEXITED(st) or os.WEXITSTATUS(st) != 0:
        raise RuntimeError("%s: wait status %d" % (prog, st))
    return prog + " ran"


@sanity("sanity.fork", "fork a child process")
def _s_fork():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, st = os.waitpid(pid, 0)
    if not os.WIFEXITED(st) or os.WEXITSTATUS(st) != 7:
        raise RuntimeError("child wait status %d" % st)
    return "fork and wait work"


# ------------------------------------------------------------- writes

def _open_close(path, flags, mode=0o600):
    fd = os.open(path, flags | os.O_CLOEXEC, mode)
    os.close(fd)


@attempt("writes.direct", "append to a file outside the workdir")
def _w_direct():
    p = OUT["file"]
    try:
        _open_close(p, os.O_WRONLY | os.O_APPEND)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p))
    return possible("opened %s for writing (nothing written)" % p)


@attempt("writes.create", "create a file outside the workdir")
def _w_create():
    p = os.path.join(OUT["dir"], "created-" + RAND)
    try:
        _open_close(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p))
    os.unlink(p)
    return possible("created %s" % p)


@attempt("writes.tmp", "create a file in the shared /tmp")
def _w_tmp():
    p = "/tmp/confine-probe-shared-" + RAND
    try:
        _open_close(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p))
    os.unlink(p)
    return possible("created %s (removed)" % p)


@attempt("writes.home", "open a shell start-up file in HOME for writing")
def _w_home():
    for n in (".bashrc", ".profile", ".zshrc", ".bash_profile"):
        p = os.path.join(HOME, n)
        if os.path.isfile(p):
            try:
                _open_close(p, os.O_WRONLY | os.O_APPEND)
            except OSError as e:
                return blocked(e.errno, by_fs(e.errno, p))
            return possible("opened %s for writing (nothing written)" % p)
    p = os.path.join(HOME, ".confine-probe-" + RAND)
    try:
        _open_close(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p))
    os.unlink(p)
    return possible("created %s (removed)" % p)


@attempt("writes.symlink", "write through a symlink in the workdir that points outside")
def _w_symlink():
    link = os.path.join(scratch(), "link-out")
    os.symlink(OUT["file"], link)
    try:
        _open_close(link, os.O_WRONLY | os.O_APPEND)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, OUT["file"]))
    return possible("wrote through %s -> %s" % (link, OUT["file"]))


@attempt("writes.hardlink", "hard-link a file from outside into the workdir")
def _w_hardlink():
    dst = os.path.join(scratch(), "hardlink-in")
    try:
        os.link(OUT["file"], dst)
    except OSError as e:
        if e.errno == errno.EPERM and not LL:
            return blocked(e.errno, "sysctl fs.protected_hardlinks")
        return blocked(e.errno, by_fs(e.errno, OUT["file"]))
    os.unlink(dst)
    return possible("linked %s into the workdir: writable there" % OUT["file"])


@attempt("writes.rename_out", "move a file from the workdir to outside")
def _w_rename_out():
    src = os.path.join(scratch(), "to-move")
    with open(src, "w") as f:
        f.write("x")
    dst = os.path.join(OUT["dir"], "moved-" + RAND)
    try:
        os.rename(src, dst)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, dst))
    os.unlink(dst)
    return possible("moved a file to %s" % dst)


@attempt("writes.rename_in", "move a file from outside into the workdir")
def _w_rename_in():
    src = OUT["victim"]
    dst = os.path.join(scratch(), "stolen")
    try:
        os.rename(src, dst)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, src))
    os.rename(dst, src)
    return possible("moved %s into the workdir (moved back)" % src)


@attempt("writes.truncate", "truncate(2) a file outside the workdir")
def _w_truncate():
    p = OUT["trunc"]
    size = os.stat(p).st_size
    try:
        os.truncate(p, size)  # to its own size: no change if it works
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p))
    return possible("truncate(%s, %d) succeeded" % (p, size))


@attempt("writes.open_trunc", "open(O_RDONLY|O_TRUNC) a file outside the workdir")
def _w_open_trunc():
    p = OUT["trunc"]
    try:
        _open_close(p, os.O_RDONLY | os.O_TRUNC)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p))
    return possible("%s truncated through a read-only open" % p)


@attempt("writes.dev_shm", "write a file in the shared /dev/shm (probe's own)")
def _w_shm():
    p = OUT.get("shm")
    if not p:
        raise Skip("no /dev/shm on this host")
    try:
        _open_close(p, os.O_WRONLY | os.O_APPEND)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p))
    return possible("opened %s for writing (nothing written): /dev/shm is shared with every "
                    "process of the user" % p)


@attempt("writes.proc_root", "write outside through /proc/self/root")
def _w_proc_root():
    p = "/proc/self/root" + OUT["file"]
    try:
        _open_close(p, os.O_WRONLY | os.O_APPEND)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, OUT["file"]))
    return possible("opened %s for writing" % p)


@attempt("writes.proc_sys", "open a kernel setting in /proc/sys for writing")
def _w_proc_sys():
    p = "/proc/sys/kernel/hostname"
    try:
        _open_close(p, os.O_WRONLY)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p))
    return possible("opened %s for writing (nothing written)" % p)


@attempt("writes.chmod", "change the mode of a file outside the workdir (chmod)")
def _w_chmod():
    p = OUT["file"]
    mode = stat.S_IMODE(os.stat(p).st_mode)
    try:
        os.chmod(p, mode)  # to its own mode: no change if it works
    except OSError as e:
        return blocked(e.errno, by_meta(e.errno, p))
    return possible("chmod(%s, %o) succeeded: modes (and times) of the user's files outside "
                    "can be changed" % (p, mode))


def by_meta(err, path):
    """Without a mount namespace the broker refuses metadata calls (EROFS, as the
    read-only view would; EACCES for what it cannot judge)."""
    if META and err in (errno.EROFS, errno.EACCES):
        return "broker (metadata mediation)"
    return by_fs(err, path)


@attempt("writes.utime", "set the times of a file outside the workdir (utime)")
def _w_utime():
    p = OUT["file"]
    st = os.stat(p)
    try:
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # to its own times
    except OSError as e:
        return blocked(e.errno, by_meta(e.errno, p))
    return possible("utime(%s) succeeded: times of the user's files outside can be changed" % p)


@attempt("writes.setxattr", "set an extended attribute on a file outside the workdir")
def _w_setxattr():
    p = OUT["file"]
    try:
        os.setxattr(p, "user.confine-probe", b"1")
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise Skip("the filesystem has no user xattrs") from None
        return blocked(e.errno, by_meta(e.errno, p))
    try:
        os.removexattr(p, "user.confine-probe")
    except OSError:
        pass
    return possible("setxattr(%s) succeeded: extended attributes of the user's files outside "
                    "can be changed" % p)


@attempt("writes.chattr", "set inode flags of a file outside the workdir (FS_IOC_SETFLAGS)")
def _w_chattr():
    p = OUT["file"]
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p, os.R_OK), "cannot even open it")
    try:
        flags = ctypes.c_long(0)
        if libc.ioctl(fd, ctypes.c_ulong(0x80086601), ctypes.byref(flags)) != 0:  # GETFLAGS
            raise Skip("the filesystem has no inode flags")
        if libc.ioctl(fd, ctypes.c_ulong(0x40086602), ctypes.byref(flags)) != 0:  # SETFLAGS
            err = ctypes.get_errno()
            return blocked(err, "seccomp" if META and err == errno.EPERM else by_fs(err, p))
    finally:
        os.close(fd)
    return possible("FS_IOC_SETFLAGS on %s succeeded (to its own flags)" % p)


@attempt("writes.file_size", "write a file larger than the profile's file-size limit (sparse)")
def _w_file_size():
    lim = LIMITS.get("file_size")
    at = lim if lim else 16 << 30        # no limit set: show that 16G (sparse) works
    path = os.path.join(scratch(), "big-" + RAND)

    def child():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.pwrite(fd, b"x", at)      # one byte past the limit, nothing in between
        finally:
            os.close(fd)
            os.unlink(path)
        return "ok"
    try:
        kind, val = in_child(child)
    except OSError as e:
        if e.errno == errno.EFBIG and lim:
            return blocked(e.errno, LIMIT_HOW.get("file_size", "rlimit").split(":")[0],
                           "a write past %d bytes is refused" % lim)
        raise
    if kind == "signal":
        return killed(val)
    return possible("wrote byte %d of a file (file_size %s)" % (at, lim or "unlimited"))


# ------------------------------------------------------------ secrets

def _read1(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, 1)
    finally:
        os.close(fd)


@attempt("secrets.outside_file", "read a file outside the granted paths")
def _x_outside():
    p = OUT["secret"]
    try:
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p, os.R_OK))
    try:
        data = os.read(fd, 256).decode(errors="replace")
    finally:
        os.close(fd)
    if CFG.get("canary") and CFG["canary"] in data:
        return possible("read the probe's canary secret from %s" % p)
    return possible("read %s" % p)


@attempt("secrets.credentials", "read credential files in HOME (~/.ssh, ~/.aws, ...)")
def _x_creds():
    paths = CFG.get("credential_files") or []
    if not paths:
        raise Skip("no credential files found in %s" % HOME)
    first = None
    for p in paths:
        try:
            _read1(p)
        except OSError as e:
            if first is None:
                first = (e.errno, p)
            continue
        return possible("read %s" % p)
    return blocked(first[0], by_fs(first[0], first[1], os.R_OK),
                   "%d file(s) tried, e.g. %s" % (len(paths), first[1]))


@attempt("secrets.home_dir", "list the HOME directory")
def _x_home():
    try:
        names = os.listdir(HOME)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, HOME, os.R_OK))
    return possible("listed %d entries of %s" % (len(names), HOME))


@attempt("secrets.shadow", "read /etc/shadow")
def _x_shadow():
    try:
        _read1("/etc/shadow")
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, "/etc/shadow", os.R_OK))
    return possible("read /etc/shadow")


_SECRETISH = ("TOKEN", "SECRET", "KEY", "PASSW", "CREDENTIAL", "AUTH", "COOKIE", "SESSION",
              "PRIVATE")
_SECRET_PREFIX = ("AWS_", "AZURE_", "GCP_", "GOOGLE_", "VAULT_", "SSH_", "GPG_", "DBUS_",
                  "DOCKER_", "KUBECONFIG")


@attempt("secrets.environment", "secret-looking environment variables")
def _x_env():
    found = sorted(k for k in os.environ
                   if any(s in k.upper() for s in _SECRETISH) or k.upper().startswith(_SECRET_PREFIX))
    canary = CFG.get("canary_env")
    if found:
        extra = " (including the probe's canary %s)" % canary if canary in found else ""
        return possible("visible: %s%s" % (", ".join(found), extra))
    return blocked("absent", "environment allowlist",
                   "the probe's canary %s was not passed" % canary if canary else "")


@attempt("secrets.proc_environ", "read another process's environment (/proc/PID/environ)")
def _x_environ():
    pid = CFG.get("target_pid")
    if not pid:
        raise Skip("no target process")
    p = "/proc/%d/environ" % pid
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as e:
        return blocked(e.errno, "landlock (ptrace rule)" if LL and e.errno == errno.EACCES
                       else by_sys(e.errno, cap="SYS_PTRACE"))
    seen = CFG.get("canary", "").encode() in data
    return possible("read %s%s" % (p, " (canary found)" if seen else ""))


@attempt("secrets.proc_cmdline", "read another process's command line (/proc/PID/cmdline)")
def _x_cmdline():
    pid = CFG.get("target_pid")
    if not pid:
        raise Skip("no target process")
    p = "/proc/%d/cmdline" % pid
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, p, os.R_OK))
    seen = CFG.get("canary", "").encode() in data
    return possible("read %s%s: tokens passed on command lines leak" %
                    (p, " (canary found)" if seen else ""))


@attempt("secrets.inherited_fds", "descriptors inherited from the launcher")
def _x_fds():
    try:
        fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
    except OSError:
        raise Skip("/proc/self/fd not readable") from None
    extra = []
    for fd in fds:
        if fd <= 2:
            continue
        try:
            target = os.readlink("/proc/self/fd/%d" % fd)
        except OSError:
            continue  # the descriptor of the listing itself, already closed
        if target.startswith("/proc/") and target.endswith("/fd"):
            continue
        extra.append("%d -> %s" % (fd, target))
    if extra:
        return possible("open: " + ", ".join(extra))
    return blocked("none", "launcher closes descriptors",
                   "only 0, 1, 2 are open (the probe left fd %s open outside)" % CFG.get("inherit_fd"))


# ------------------------------------------------------------ devices

@attempt("devices.block_open", "open raw block devices (disks, partitions)")
def _d_block():
    devs = CFG.get("block_devices") or []
    if not devs:
        raise Skip("no block devices found")
    first = None
    for d in devs:
        for flags, how in ((os.O_RDWR, "read-write"), (os.O_RDONLY, "read-only")):
            try:
                _open_close(d, flags | os.O_NONBLOCK)
            except OSError as e:
                if first is None:
                    first = (e.errno, d, flags)
                continue
            return possible("opened %s %s (closed at once, nothing read or written)" % (d, how))
    err, d, flags = first
    return blocked(err, by_fs(err, d, os.R_OK | os.W_OK),
                   "%d device(s) tried, e.g. %s" % (len(devs), d))


@attempt("devices.dev_mem", "open /dev/mem, /dev/kmem, /dev/port")
def _d_mem():
    present = [p for p in ("/dev/mem", "/dev/kmem", "/dev/port") if os.path.exists(p)]
    if not present:
        raise Skip("no /dev/mem, /dev/kmem or /dev/port on this host")
    first = None
    for p in present:
        try:
            _open_close(p, os.O_RDONLY)
        except OSError as e:
            first = first or (e.errno, p)
            continue
        return possible("opened %s" % p)
    return blocked(first[0], by_fs(first[0], first[1], os.R_OK) if first[0] == errno.EACCES
                   else by_sys(first[0], cap="SYS_RAWIO"), first[1])


@attempt("devices.mknod", "create a block device node (mknod)")
def _d_mknod():
    base = SCRATCH or _tmpdir()
    p = os.path.join(base, "blockdev-" + RAND)
    mode = stat.S_IFBLK | 0o600
    dev = os.makedev(7, 0)
    try:
        os.mknod(p, mode, dev)
    except OSError as e:
        return blocked(e.errno, by_sys(e.errno, ("mknodat", [AT_FDCWD, 0, mode, dev]),
                                       cap="MKNOD", landlock=True))
    os.unlink(p)
    return possible("created a block device node for loop0 (removed)")


_BLOCK_OPENED = {}


def _disk_writable():
    """Whether any block device opened for writing (cached from devices.block_open)."""
    if "v" not in _BLOCK_OPENED:
        ok = None
        for d in CFG.get("block_devices") or []:
            try:
                _open_close(d, os.O_WRONLY | os.O_NONBLOCK)
                ok = d
                break
            except OSError:
                continue
        _BLOCK_OPENED["v"] = ok
    return _BLOCK_OPENED["v"]


def _ioctl_reaches(req):
    """Issue ioctl(req) on /dev/null. A filter answers EPERM; otherwise the
    request reaches the kernel, which answers ENOTTY (no such request for
    /dev/null). Returns (reached, errno)."""
    fd = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    try:
        c = ctypes.c_char(b"\0")
        r, e = sc("ioctl", fd, req, ctypes.byref(c))
    finally:
        os.close(fd)
    return e != errno.EPERM, e


def _ioctls(names):
    """(name, number) pairs; each is also tried with high bits set, since the
    kernel truncates the request to 32 bits and a 64-bit compare misses it."""
    reached, first = [], None
    for name, num in names:
        for req, label in ((num, name), (num | 1 << 32, name + "|1<<32")):
            ok, e = _ioctl_reaches(req)
            if ok:
                reached.append(label)
            elif first is None:
                first = (e, req)
    return reached, first


def _disk_ioctl(names):
    reached, first = _ioctls(names)
    if not reached:
        return blocked(first[0], by_sys(first[0], ("ioctl", [0, first[1]])))
    disk = _disk_writable()
    if disk:
        return possible("not filtered (%s reached a driver) and %s opens for writing"
                        % (", ".join(reached), disk))
    return blocked("no disk", "landlock" if LL else "DAC",
                   "not filtered (%s reach a driver: ENOTTY from /dev/null), but no block device "
                   "opens for writing" % ", ".join(reached))


@attempt("devices.ioctl_discard", "discard/zero-out ioctls (BLKDISCARD, BLKSECDISCARD, BLKZEROOUT)")
def _d_discard():
    return _disk_ioctl([("BLKDISCARD", 0x1277), ("BLKSECDISCARD", 0x127D),
                        ("BLKZEROOUT", 0x127F)])


@attempt("devices.ioctl_partition", "partition-table ioctls (BLKPG, BLKRRPART)")
def _d_part():
    return _disk_ioctl([("BLKPG", 0x1269), ("BLKRRPART", 0x125F)])


@attempt("devices.ioctl_scsi", "raw SCSI pass-through (SG_IO)")
def _d_sgio():
    return _disk_ioctl([("SG_IO", 0x2285)])


# --------------------------------------------------- mounts/namespaces

@attempt("mounts.mount", "mount a filesystem (mount(2))")
def _m_mount():
    target = (SCRATCH or _tmpdir()).encode()
    fstype = b"confine-probe-nofs"
    r, e = sc("mount", b"none", target, fstype, 0, 0)
    if r == 0 or e in (errno.ENODEV, errno.EINVAL):
        return possible("mount(2) passed every permission check (%s for the deliberately "
                        "unknown filesystem type)" % ename(e))
    return blocked(e, by_sys(e, ("mount", [0, 0, 0, 0, 0]), cap="SYS_ADMIN", landlock=True))


@attempt("mounts.new_mount_api", "new mount API (fsopen, open_tree)")
def _m_newapi():
    r, e = sc("fsopen", b"tmpfs", 1)  # FSOPEN_CLOEXEC
    if r >= 0:
        _close(r)
        return possible("fsopen(tmpfs) returned a filesystem context")
    r2, e2 = sc("open_tree", AT_FDCWD, b"/", 1 | 0o2000000)  # OPEN_TREE_CLONE | CLOEXEC
    if r2 >= 0:
        _close(r2)
        return possible("open_tree(/, OPEN_TREE_CLONE) returned a detached mount")
    return blocked(e, by_sys(e, ("fsopen", [0, 1]), cap="SYS_ADMIN", landlock=True))


@attempt("mounts.chroot", "chroot(2)")
def _m_chroot():
    kind, val = child_call("chroot", b"/")
    if kind == "signal":
        return killed(val)
    r, e = val
    if r == 0:
        return possible("chroot succeeded (in a child that exited)")
    return blocked(e, by_sys(e, ("chroot", [0]), cap="SYS_CHROOT"))


def _ns(call, args, what, cap=None):
    kind, val = child_call(call, *args)
    if kind == "signal":
        return killed(val)
    r, e = val
    if r == 0:
        return possible(what + " (in a child that exited)")
    return blocked(e, by_sys(e, (call, list(args)), cap=cap))


@attempt("mounts.unshare_user", "new user namespace (unshare CLONE_NEWUSER)")
def _m_userns():
    return _ns("unshare", (CLONE_NEWUSER,), "unshare(CLONE_NEWUSER) succeeded")


@attempt("mounts.unshare_mount", "new mount namespace (unshare CLONE_NEWNS)")
def _m_mntns():
    return _ns("unshare", (CLONE_NEWNS,), "unshare(CLONE_NEWNS) succeeded", cap="SYS_ADMIN")


@attempt("mounts.clone_newuser", "clone(2) with CLONE_NEWUSER")
def _m_clone():
    def child():
        r, e = sc("clone", CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
        if r == 0:
            os._exit(0)
        if r > 0:
            os.waitpid(r, 0)
        return [r, e]
    kind, val = in_child(child)
    if kind == "signal":
        return killed(val)
    r, e = val
    if r > 0:
        return possible("clone(CLONE_NEWUSER) created a process in a new user namespace")
    return blocked(e, by_sys(e, ("clone", [CLONE_NEWUSER | SIGCHLD])))


@attempt("mounts.clone3", "clone3(2) with CLONE_NEWUSER (flags hidden in memory)")
def _m_clone3():
    def child():
        args = struct.pack("<11Q", CLONE_NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0)
        buf = ctypes.create_string_buffer(args, len(args))
        r, e = sc("clone3", ctypes.addressof(buf), len(args))
        if r == 0:
            os._exit(0)
        if r > 0:
            os.waitpid(r, 0)
        return [r, e]
    kind, val = in_child(child)
    if kind == "signal":
        return killed(val)
    r, e = val
    if r > 0:
        return possible("clone3(CLONE_NEWUSER) created a process in a new user namespace")
    return blocked(e, by_sys(e, ("clone3", [0, 0])))


@attempt("mounts.setns", "join a namespace (setns)")
def _m_setns():
    def child():
        try:
            fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
        except OSError:
            fd = -1
        return list(sc("setns", fd, CLONE_NEWNS))
    kind, val = in_child(child)
    if kind == "signal":
        return killed(val)
    r, e = val
    if r == 0:
        return possible("setns(CLONE_NEWNS) succeeded (own namespace, in a child)")
    return blocked(e, by_sys(e, ("setns", [0, CLONE_NEWNS]), cap="SYS_ADMIN"))


# --------------------------------------------------------- kernel

def _reached(call, args, ok_errnos, what, cap=None, sysctl=None, landlock=False):
    """A call with deliberately invalid arguments: the kernel answers with one of
    ok_errnos only after its permission checks passed."""
    r, e = sc(call, *args)
    if r >= 0 or e in ok_errnos:
        return possible(what + ("" if r >= 0 else " (%s for the deliberately invalid "
                                                  "argument, after the permission checks)" % ename(e)))
    return blocked(e, by_sys(e, (call, [a if isinstance(a, int) else 0 for a in args]),
                             cap=cap, sysctl=sysctl, landlock=landlock))


@attempt("kernel.modules", "load a kernel module (finit_module)")
def _k_modules():
    return _reached("finit_module", (-1, b"", 0), (errno.EBADF,),
                    "finit_module passed the capability check", cap="SYS_MODULE",
                    sysctl="kernel.modules_disabled")


@attempt("kernel.kexec", "load a new kernel (kexec_load)")
def _k_kexec():
    return _reached("kexec_load", (0, 17, 0, 0), (errno.EINVAL,),
                    "kexec_load passed the permission checks", cap="SYS_BOOT",
                    sysctl="kernel.kexec_load_disabled")


@attempt("kernel.reboot", "reboot(2) (with a wrong magic number)")
def _k_reboot():
    return _reached("reboot", (0xfee1dead, 0, 0, 0), (errno.EINVAL,),
                    "reboot passed the capability check", cap="SYS_BOOT")


@attempt("kernel.bpf", "create a BPF map (bpf)")
def _k_bpf():
    buf = ctypes.create_string_buffer(128)
    struct.pack_into("<IIII", buf, 0, 2, 4, 4, 1)  # BPF_MAP_TYPE_ARRAY, 4, 4, 1 entry
    r, e = sc("bpf", 0, ctypes.addressof(buf), 128)
    return fd_result(r, e, ("bpf", [0]), "created a BPF array map", cap="BPF",
                     sysctl="kernel.unprivileged_bpf_disabled")


@attempt("kernel.perf", "open a perf event (perf_event_open)")
def _k_perf():
    buf = ctypes.create_string_buffer(128)
    struct.pack_into("<IIQ", buf, 0, 1, 128, 9)     # PERF_TYPE_SOFTWARE, size, SW_DUMMY
    struct.pack_into("<Q", buf, 40, 1 | 1 << 5 | 1 << 6)  # disabled, exclude_kernel/hv
    r, e = sc("perf_event_open", ctypes.addressof(buf), 0, -1, -1, 8)
    return fd_result(r, e, ("perf_event_open", [0]), "opened a perf event",
                     cap="PERFMON", sysctl="kernel.perf_event_paranoid")


@attempt("kernel.io_uring", "set up io_uring (io_uring_setup)")
def _k_uring():
    buf = ctypes.create_string_buffer(120)
    r, e = sc("io_uring_setup", 1, ctypes.addressof(buf))
    return fd_result(r, e, ("io_uring_setup", [1]), "created an io_uring instance",
                     sysctl="kernel.io_uring_disabled")


@attempt("kernel.userfaultfd", "userfaultfd(2)")
def _k_uffd():
    r, e = sc("userfaultfd", os.O_CLOEXEC | os.O_NONBLOCK | 1)  # UFFD_USER_MODE_ONLY
    return fd_result(r, e, ("userfaultfd", [0]), "created a userfaultfd",
                     sysctl="vm.unprivileged_userfaultfd")


@attempt("kernel.keyring", "reach the user's kernel keyring (keyctl)")
def _k_keyring():
    r, e = sc("keyctl", 0, -4, 0)  # KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING
    if r >= 0:
        return possible("the user keyring (id %d) is reachable" % r)
    return blocked(e, by_sys(e, ("keyctl", [0, (-4) & U64, 0])))


@attempt("kernel.af_alg", "kernel crypto socket (AF_ALG)")
def _k_afalg():
    r, e = sc("socket", 38, 5 | 0o2000000, 0)
    if r >= 0:
        _close(r)
        return possible("created an AF_ALG socket")
    if e == errno.EAFNOSUPPORT:
        return blocked(e, "kernel (not built in)")
    return blocked(e, by_sys(e, ("socket", [38, 5 | 0o2000000, 0])))


@attempt("kernel.personality", "disable ASLR (personality ADDR_NO_RANDOMIZE)")
def _k_persona():
    kind, val = child_call("personality", 0x0040000)
    if kind == "signal":
        return killed(val)
    r, e = val
    if r >= 0:
        return possible("personality(ADDR_NO_RANDOMIZE) accepted (in a child)")
    return blocked(e, by_sys(e, ("personality", [0x0040000])))


@attempt("kernel.syslog", "read the kernel log (syslog)")
def _k_syslog():
    return _reached("syslog", (10, 0, 0), (), "syslog(SIZE_BUFFER) answered", cap="SYSLOG",
                    sysctl="kernel.dmesg_restrict")


@attempt("kernel.clock", "set the clock (settimeofday(NULL, NULL))")
def _k_clock():
    return _reached("settimeofday", (0, 0), (), "settimeofday passed the capability check "
                    "(NULL arguments: nothing changed)", cap="SYS_TIME")


@attempt("kernel.swap", "swapon(2) (of a nonexistent file)")
def _k_swap():
    return _reached("swapon", (b"/nonexistent-confine-probe-swap", 0), (errno.ENOENT,),
                    "swapon passed the capability check", cap="SYS_ADMIN")


@attempt("kernel.open_by_handle", "open a file by handle (open_by_handle_at, 'shocker')")
def _k_handle():
    h = ctypes.create_string_buffer(struct.pack("<Ii", 8, 1) + b"\0" * 8)
    return _reached("open_by_handle_at", (AT_FDCWD, ctypes.addressof(h), 0),
                    (errno.ESTALE, errno.EINVAL, errno.EBADF),
                    "open_by_handle_at passed the capability check", cap="DAC_READ_SEARCH")


@attempt("kernel.raw_io", "I/O port access (ioperm)")
def _k_ioperm():
    if ARCH not in ("x86_64", "i386", "i686"):
        raise Skip("ioperm exists only on x86")
    kind, val = child_call("ioperm", 0x80, 1, 1)
    if kind == "signal":
        return killed(val)
    r, e = val
    if r == 0:
        return possible("ioperm(0x80) granted (in a child)")
    return blocked(e, by_sys(e, ("ioperm", [0x80, 1, 1]), cap="SYS_RAWIO"))


@attempt("kernel.compat_i386", "32-bit system call through int 0x80")
def _k_i386():
    if ARCH != "x86_64":
        raise Skip("the i386 compat ABI exists only on x86_64")

    def child():
        code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20 (getpid); int 0x80; ret
        m = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                      prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        m.write(code)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        r = ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
        return [r, os.getpid()]
    kind, val = in_child(child)
    if kind == "signal":
        if val == signal.SIGSYS:
            return blocked("SIGSYS", "seccomp", "the process was killed (non-native ABI)")
        return blocked(signal.Signals(val).name, "kernel (no IA32 emulation)")
    r, pid = val
    if r == pid:
        return possible("int 0x80 getpid returned the pid: the i386 table is reachable")
    if r == -errno.ENOSYS:
        return blocked("ENOSYS", "kernel (IA32 emulation disabled)")
    return blocked(ename(-r) if r < 0 else str(r), "kernel")


@attempt("kernel.compat_x32", "x32 system call (nr | 0x40000000)")
def _k_x32():
    if ARCH != "x86_64":
        raise Skip("the x32 ABI exists only on x86_64")
    nr = NR.get("getpid")

    def child():
        ctypes.set_errno(0)
        r = libc.syscall(ctypes.c_long(nr | 0x40000000))
        return [r, ctypes.get_errno() if r == -1 else 0]
    kind, val = in_child(child)
    if kind == "signal":
        return killed(val)
    r, e = val
    if r > 0:
        return possible("x32 getpid answered")
    return blocked(e, "kernel (x32 ABI disabled)" if e == errno.ENOSYS else "kernel")


# ------------------------------------------------------- privilege

@attempt("privilege.no_new_privs", "no_new_privs is set (setuid bits and file caps ignored)")
def _p_nnp():
    v = STATUS.get("NoNewPrivs")
    if v == "1":
        return blocked("NoNewPrivs=1", "no_new_privs")
    return possible("NoNewPrivs=%s: executing a setuid binary or one with file capabilities "
                    "raises privileges" % v)


@attempt("privilege.capabilities", "capabilities held or obtainable")
def _p_caps():
    names = ("CapInh", "CapPrm", "CapEff", "CapAmb")
    held = ["%s=%s" % (n, STATUS.get(n)) for n in names if _capmask(n)]
    bnd = _capmask("CapBnd")
    if held:
        return possible(", ".join(held))
    if bnd and STATUS.get("NoNewPrivs") != "1":
        return possible("CapBnd=%s with no_new_privs unset: an exec can regain them"
                        % STATUS.get("CapBnd"))
    if bnd:
        return blocked("none held", "capabilities + no_new_privs",
                       "no capability held; bounding set %s kept (dropping it needs root) but "
                       "unreachable with no_new_privs" % STATUS.get("CapBnd"))
    return blocked("none", "capabilities", "all capability sets empty")


@attempt("privilege.setuid_exec", "execute a setuid-root binary")
def _p_suid():
    t = CFG.get("suid_target")
    if not t:
        raise Skip("needs the probe to be started as root (it plants a harmless setuid copy "
                   "of id(1)); privilege.no_new_privs covers it")
    import subprocess
    try:
        p = subprocess.run([t, "-u"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=3)
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, t, os.X_OK))
    euid = p.stdout.decode().strip()
    if euid == "0":
        return possible("the setuid binary ran with euid 0")
    if STATUS.get("NoNewPrivs") == "1":
        return blocked("euid %s" % euid, "no_new_privs")
    try:
        if os.statvfs(t).f_flag & os.ST_NOSUID:
            return blocked("euid %s" % euid, "nosuid mount")
    except OSError:
        pass
    return blocked("euid %s" % euid, "kernel")


# ------------------------------------------------------- processes

def _target():
    pid = CFG.get("target_pid")
    if not pid:
        raise Skip("no target process")
    return pid


@attempt("processes.signal", "signal a process outside the sandbox (kill)")
def _o_signal():
    pid = _target()
    try:
        os.kill(pid, 0)
    except OSError as e:
        return blocked(e.errno, by_sys(e.errno, ("kill", [pid, 0]), cap="KILL", scope="signal"))
    return possible("kill(%d, 0) allowed: any signal could be sent" % pid)


@attempt("processes.ptrace", "ptrace a process outside the sandbox")
def _o_ptrace():
    pid = _target()
    r, e = sc("ptrace", 0x4206, pid, 0, 0)  # PTRACE_SEIZE (does not stop the target)
    if r == 0:
        return possible("PTRACE_SEIZE of pid %d succeeded" % pid)
    return blocked(e, by_sys(e, ("ptrace", [0x4206, pid]), cap="SYS_PTRACE", landlock=True))


@attempt("processes.vm_readv", "read another process's memory (process_vm_readv)")
def _o_vm():
    pid = _target()
    buf = ctypes.create_string_buffer(8)
    local = struct.pack("<QQ", ctypes.addressof(buf), 8)
    remote = struct.pack("<QQ", 0x10000, 8)
    lb = ctypes.create_string_buffer(local, 16)
    rb = ctypes.create_string_buffer(remote, 16)
    r, e = sc("process_vm_readv", pid, ctypes.addressof(lb), 1, ctypes.addressof(rb), 1, 0)
    if r >= 0 or e == errno.EFAULT:
        return possible("process_vm_readv on pid %d passed the access check" % pid)
    return blocked(e, by_sys(e, ("process_vm_readv", [pid]), cap="SYS_PTRACE", landlock=True))


@attempt("processes.pidfd_getfd", "steal another process's descriptor (pidfd_getfd)")
def _o_getfd():
    pid = _target()
    pfd, e = sc("pidfd_open", pid, 0)
    if pfd < 0:
        return blocked(e, by_sys(e, ("pidfd_open", [pid, 0])))
    try:
        r, e = sc("pidfd_getfd", pfd, 0, 0)
    finally:
        _close(pfd)
    return fd_result(r, e, ("pidfd_getfd", [pfd, 0, 0]), "took a copy of pid %d's stdin" % pid,
                     cap="SYS_PTRACE", landlock=True)


@attempt("processes.proc_mem", "open another process's /proc/PID/mem")
def _o_mem():
    pid = _target()
    p = "/proc/%d/mem" % pid
    try:
        _open_close(p, os.O_RDONLY)
    except OSError as e:
        return blocked(e.errno, "landlock (ptrace rule)" if LL and e.errno == errno.EACCES
                       else by_sys(e.errno, cap="SYS_PTRACE"))
    return possible("opened %s" % p)


@attempt("processes.proc_cwd", "enter another process's working directory (/proc/PID/cwd)")
def _o_cwd():
    pid = _target()
    p = "/proc/%d/cwd" % pid
    try:
        os.listdir(p)
    except OSError as e:
        return blocked(e.errno, "landlock (ptrace rule)" if LL and e.errno == errno.EACCES
                       else by_sys(e.errno, cap="SYS_PTRACE"))
    return possible("listed %s" % p)


@attempt("processes.fork_bomb", "start tasks without bound (threads until refused)")
def _o_fork_bomb():
    lim = LIMITS.get("processes")
    # Bounded: the profile's limit and a margin (or 4096 when none is set).
    goal = (lim or 4096) + 256

    def child():
        # _thread does not wait for each thread to start (threading does: a
        # context switch per thread, seconds on a busy host); the threads block
        # on a held lock and end with the child's _exit, never joined.
        import _thread
        import time
        _thread.stack_size(64 * 1024)
        lock = _thread.allocate_lock()
        lock.acquire()
        n, end = 0, time.monotonic() + 2.0    # inside the per-attempt timer
        try:
            while n < goal:
                if time.monotonic() > end:
                    return -n
                _thread.start_new_thread(lock.acquire, ())
                n += 1
        except RuntimeError:
            pass
        return n
    kind, n = in_child(child)
    if kind == "signal":
        return killed(n)
    if n < 0:
        raise Skip("started %d tasks in 2 s without reaching the limit (host too busy)" % -n)
    if n < goal:
        return blocked("EAGAIN", LIMIT_HOW.get("processes", "kernel").split(":")[0],
                       "refused after %d tasks (processes %s)" % (n, lim))
    return possible("started %d tasks (processes %s)" % (n, lim or "unlimited"))


# -------------------------------------------------------- terminal

def _tiocsti(req):
    """TIOCSTI on a private pty that is the caller's controlling terminal
    (the pushed byte lands in our own pty, never in the user's terminal)."""
    def child():
        os.setsid()
        try:
            m, s = os.openpty()
        except OSError:
            return ["nopty", 0]
        sc("ioctl", s, TIOCSCTTY, 0)
        c = ctypes.c_char(b"#")
        r, e = sc("ioctl", s, req, ctypes.byref(c))
        return [r, e]
    kind, val = in_child(child)
    if kind == "signal":
        return killed(val)
    r, e = val
    if r != "nopty":
        if r == 0:
            return possible("TIOCSTI pushed a byte into the controlling terminal's input "
                            "(a private pty here)")
        return blocked(e, by_sys(e, ("ioctl", [0, req]), cap="SYS_ADMIN",
                                 sysctl="dev.tty.legacy_tiocsti"))
    # No pty inside the sandbox: check the filter on /dev/null instead.
    reached, err = _ioctl_reaches(req)
    if not reached:
        return blocked(err, by_sys(err, ("ioctl", [0, req])))
    if CFG.get("legacy_tiocsti") == "1" or has_cap("SYS_ADMIN"):
        return possible("TIOCSTI is not filtered (ENOTTY from /dev/null) and "
                        "dev.tty.legacy_tiocsti=1: it works on any terminal the agent holds")
    return blocked(err, "sysctl dev.tty.legacy_tiocsti", "not filtered, but the kernel "
                   "requires CAP_SYS_ADMIN for TIOCSTI")


@attempt("terminal.tiocsti", "inject keystrokes into the terminal (TIOCSTI)")
def _t_sti():
    return _tiocsti(TIOCSTI)


@attempt("terminal.tiocsti_high_bits", "TIOCSTI with high bits set (filter bypass, CVE-2019-10063)")
def _t_sti_high():
    return _tiocsti(TIOCSTI | 1 << 32)


def _kernel_ge(major, minor):
    try:
        parts = CFG.get("kernel", os.uname().release).split(".")
        return (int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)) >= (major, minor)
    except (ValueError, IndexError):
        return False


@attempt("terminal.tioclinux", "paste into a virtual console (TIOCLINUX)")
def _t_linux():
    reached, e = _ioctl_reaches(TIOCLINUX)
    if not reached:
        return blocked(e, by_sys(e, ("ioctl", [0, TIOCLINUX])))
    if has_cap("SYS_ADMIN") or not _kernel_ge(6, 7):
        return possible("TIOCLINUX is not filtered and selection/paste is allowed here")
    return blocked(e, "kernel (needs CAP_SYS_ADMIN since 6.7)",
                   "not filtered, but the kernel refuses paste/selection without CAP_SYS_ADMIN")


# ---------------------------------------------------- host daemons

def _connect_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    s.settimeout(1.0)
    try:
        s.connect(path)
    finally:
        s.close()


def _by_unix(err, path):
    if err in (errno.EACCES, errno.EPERM):
        real = os.path.realpath(path)
        if not dac_allows(real, os.W_OK):
            return "DAC"
        if LL_ABI >= 9:
            return "landlock (resolve_unix)"
        if MEDIATION:
            return "unix-socket mediation"
        return "landlock" if LL else "kernel"
    if err == errno.ECONNREFUSED:
        return "no listener"
    return by_fs(err, path)


def _connect_each(paths, label):
    first = None
    for p in paths:
        try:
            _connect_unix(p)
        except OSError as e:
            first = first or (e.errno, p)
            continue
        return possible("connected to %s (nothing sent)" % p)
    return blocked(first[0], _by_unix(first[0], first[1]),
                   "%s: %s" % (label, ", ".join(paths)))


def _socks(kind):
    return [p for p in (CFG.get("sockets", {}).get(kind) or []) if p]


@attempt("daemons.fake_socket", "connect to a unix socket outside the workdir (probe's own)")
def _h_fake():
    return _connect_each(_socks("fake"), "probe socket")


@attempt("daemons.socket_symlink", "... through a symlink in the workdir")
def _h_symlink():
    fake = _socks("fake")
    if not fake:
        raise Skip("no probe socket")
    link = os.path.join(scratch(), "sock-link")
    os.symlink(fake[0], link)
    return _connect_each([link], "symlink to the probe socket")


@attempt("daemons.socket_proc_root", "... through /proc/self/root")
def _h_procroot():
    fake = _socks("fake")
    if not fake:
        raise Skip("no probe socket")
    return _connect_each(["/proc/self/root" + fake[0]], "via /proc/self/root")


@attempt("daemons.container_runtime", "container runtime sockets (docker, containerd, podman, ...)")
def _h_runtime():
    paths = _socks("runtime")
    if not paths:
        raise Skip("no container runtime socket on this host")
    return _connect_each(paths, "runtime sockets")


@attempt("daemons.ssh_agent", "ssh-agent ($SSH_AUTH_SOCK of the launching user)")
def _h_ssh():
    paths = _socks("ssh_agent")
    if not paths:
        raise Skip("no ssh-agent socket (SSH_AUTH_SOCK unset)")
    return _connect_each(paths, "ssh-agent")


@attempt("daemons.dbus", "D-Bus session/system bus and systemd's user manager")
def _h_dbus():
    paths = _socks("dbus")
    if not paths:
        raise Skip("no D-Bus or systemd socket found")
    return _connect_each(paths, "buses")


@attempt("daemons.multiplexer", "tmux/screen sockets (type into the user's other terminals)")
def _h_mux():
    paths = _socks("multiplexer")
    if not paths:
        raise Skip("no tmux or screen socket found")
    return _connect_each(paths, "multiplexers")


@attempt("daemons.abstract", "abstract unix socket outside the sandbox (probe's own)")
def _h_abstract():
    name = CFG.get("abstract_socket")
    if not name:
        raise Skip("no abstract socket")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    s.settimeout(1.0)
    try:
        s.connect(b"\0" + name.encode())
    except OSError as e:
        if e.errno == errno.ECONNREFUSED and CFG.get("net_namespace"):
            # abstract names live in a network namespace: outside ones do not exist here
            return blocked(e.errno, "network namespace")
        return blocked(e.errno, by_sys(e.errno, scope="abstract_unix_socket"))
    finally:
        s.close()
    return possible("connected to @%s" % name)


# -------------------------------------------------------- network

def _inet(fam, typ, proto=0, cap=None, sysctl=None):
    call = ("socket", [fam, typ | socket.SOCK_CLOEXEC, proto])
    try:
        return socket.socket(fam, typ | socket.SOCK_CLOEXEC, proto), None
    except OSError as e:
        if e.errno in (errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT) and \
                e.errno not in seccomp_errnos(*call):
            return None, blocked(e.errno, "kernel (not built in)")
        return None, blocked(e.errno, by_sys(e.errno, call, cap=cap, sysctl=sysctl))


@attempt("network.tcp_loopback", "TCP connect to a service on 127.0.0.1 (probe's own)")
def _n_tcp():
    port = CFG.get("tcp_port")
    s, res = _inet(socket.AF_INET, socket.SOCK_STREAM)
    if res:
        return res
    s.settimeout(1.0)
    try:
        s.connect(("127.0.0.1", port))
    except OSError as e:
        return blocked(e.errno, "landlock (tcp)" if LL_ABI >= 4 and e.errno == errno.EACCES
                       else by_sys(e.errno))
    finally:
        s.close()
    return possible("connected to 127.0.0.1:%d" % port)


@attempt("network.tcp_listen", "listen on a TCP port")
def _n_listen():
    s, res = _inet(socket.AF_INET, socket.SOCK_STREAM)
    if res:
        return res
    try:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
    except OSError as e:
        return blocked(e.errno, "landlock (tcp)" if LL_ABI >= 4 and e.errno == errno.EACCES
                       else by_sys(e.errno))
    finally:
        s.close()
    return possible("listened on 127.0.0.1:%d" % port)


@attempt("network.udp", "send a UDP datagram (to the probe's own 127.0.0.1 port)")
def _n_udp():
    s, res = _inet(socket.AF_INET, socket.SOCK_DGRAM)
    if res:
        return res
    try:
        s.sendto(b"", ("127.0.0.1", CFG.get("udp_port")))
    except OSError as e:
        return _net_refusal(e, "127.0.0.1:%d" % CFG.get("udp_port"), udp=True) or \
            blocked(e.errno, by_sys(e.errno))
    finally:
        s.close()
    return possible("sent an empty datagram to 127.0.0.1:%d" % CFG.get("udp_port"))


@attempt("network.dns", "UDP socket towards the DNS resolver (nothing sent unless confine's answers)")
def _n_dns():
    """The host's resolver would answer any name (query names carry data out). A socket
    connected to it is possible; nothing is sent to it. A socket whose peer is not the
    resolver was rewritten to confine's DNS server (the gateway's own, on the agent's
    loopback): blocked if it refuses a name no rule allows."""
    ns = CFG.get("resolver")
    if not ns:
        raise Skip("no IPv4 nameserver in /etc/resolv.conf")
    s, res = _inet(socket.AF_INET, socket.SOCK_DGRAM)
    if res:
        return res
    try:
        s.connect((ns, 53))
        peer = s.getpeername()
        if peer == (ns, 53):
            return possible("a UDP socket to %s:53 is ready (no query sent)" % ns)
        if not peer[0].startswith("127.") or not ROUTED:
            return possible("a UDP socket to %s:53 reached %s:%d, not confine's resolver (no query sent)"
                            % (ns, peer[0], peer[1]))
        return _confines_resolver(s, "rewritten to %s:%d" % tuple(peer))
    except OSError as e:
        return _net_refusal(e, "%s:53" % ns, udp=True) or blocked(e.errno, by_sys(e.errno))
    finally:
        s.close()


@attempt("network.metadata", "cloud metadata service (169.254.169.254:80)")
def _n_meta():
    host, port = CFG.get("metadata", ["169.254.169.254", 80])
    s, res = _inet(socket.AF_INET, socket.SOCK_STREAM)
    if res:
        return res
    s.settimeout(0.5)
    try:
        s.connect((host, port))
        peer = s.getpeername()[0]
        if peer != host:
            return _through_gateway(s, peer, None)
    except socket.timeout:
        return blocked("timeout", "unreachable from this host")
    except OSError as e:
        if e.errno == errno.EACCES and LL_ABI >= 4:
            return blocked(e.errno, "landlock (tcp)")
        if e.errno == errno.ECONNREFUSED and _handed_to_gateway(s) and not host.startswith("127."):
            return blocked(e.errno, "gateway")
        if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ECONNREFUSED,
                       errno.ETIMEDOUT):
            return blocked(e.errno, "unreachable from this host")
        return blocked(e.errno, by_sys(e.errno))
    finally:
        s.close()
    return possible("connected to %s:%d" % (host, port))


@attempt("network.raw", "raw sockets (AF_INET SOCK_RAW, AF_PACKET)")
def _n_raw():
    first = None
    for fam, typ, proto, name in ((socket.AF_INET, socket.SOCK_RAW, 1, "AF_INET/SOCK_RAW"),
                                  (17, socket.SOCK_RAW, 0, "AF_PACKET")):
        s, res = _inet(fam, typ, proto, cap="NET_RAW")
        if s is not None:
            s.close()
            return possible("created an %s socket" % name)
        first = first or res
    return first


@attempt("network.ping", "ICMP datagram (ping) socket")
def _n_ping():
    s, res = _inet(socket.AF_INET, socket.SOCK_DGRAM, 1, sysctl="net.ipv4.ping_group_range")
    if s is not None:
        s.close()
        return possible("created an ICMP datagram socket")
    return res


@attempt("network.mptcp", "MPTCP connect to the probe's 127.0.0.1 service")
def _n_mptcp():
    s, res = _inet(socket.AF_INET, socket.SOCK_STREAM, 262)
    if res:
        return res
    s.settimeout(1.0)
    try:
        s.connect(("127.0.0.1", CFG.get("tcp_port")))
    except OSError as e:
        return blocked(e.errno, "landlock (tcp)" if LL_ABI >= 4 and e.errno == errno.EACCES
                       else by_sys(e.errno))
    finally:
        s.close()
    return possible("connected over MPTCP")


def _net_refusal(e, what, udp=False):
    """A refused connect or send: which layer. None when the refusal came from the
    network (a peer's reset), not from confine."""
    if udp and e.errno == errno.EACCES and ROUTED:
        return blocked(e.errno, "gateway (UDP)", "only DNS leaves, to confine's resolver")
    if e.errno == errno.EACCES and LL_ABI >= 4 and not udp:
        return blocked(e.errno, "landlock (tcp)")
    if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL) and CFG.get("net_namespace"):
        return blocked(e.errno, "network namespace", "no route to %s from here" % what)
    if e.errno in (errno.EPERM, errno.EACCES):
        return blocked(e.errno, by_sys(e.errno))
    return None


def _gateway_closes(s):
    """A connect that succeeded but to a local peer the agent did not name: confine's
    gateway took it. Blocked only if the gateway then refuses a request for a name no rule
    allows (closes without an answer)."""
    try:
        s.sendall(b"GET / HTTP/1.1\r\nHost: confine-probe.invalid\r\nConnection: close\r\n\r\n")
        s.settimeout(2.0)
        data = s.recv(64)
    except socket.timeout:
        return None
    except OSError:
        return b""
    return data


def _handed_to_gateway(s):
    """After a refused connect: the supervisor binds the agent's socket to its loopback
    before it hands it to the gateway (mediation/inet.py), which then refused it; a
    connect a TCP stack refused leaves the socket unbound (0.0.0.0)."""
    if not ROUTED:
        return False
    try:
        return s.getsockname()[0] in ("127.0.0.1", "::ffff:127.0.0.1")
    except OSError:
        return False


def _confines_resolver(s, how):
    """A socket connected to confine's DNS server (UDP, or TCP with its length prefix):
    blocked if it refuses a name no rule allows (what a name carrying data out would
    be), possible if it answers."""
    s.settimeout(2.0)
    qid = int.from_bytes(os.urandom(2), "big")
    q = _dns_query("exfil-%s.confine-probe.invalid" % RAND, qid)
    tcp = s.type == socket.SOCK_STREAM
    try:
        s.sendall(struct.pack("!H", len(q)) + q if tcp else q)
        data = s.recv(514)
        if tcp:
            data = data[2:]
    except socket.timeout:
        return blocked("timeout", "gateway (DNS)", how + ", no answer to a name no rule allows")
    except OSError:
        return blocked("closed", "gateway (DNS)", how + ", closed on a name no rule allows")
    if len(data) >= 12 and data[:2] == qid.to_bytes(2, "big") and (data[3] & 0x0F) in (3, 5):
        return blocked("NXDOMAIN" if data[3] & 0x0F == 3 else "REFUSED", "gateway (DNS)",
                       how + ", which refuses names no rule allows")
    return possible("%s, which answered a name no rule allows" % how)


def _through_gateway(s, peer, banner):
    """A connect that succeeded to a local peer the agent did not name: confine's gateway
    took it. Possible if it relayed the connection (the probe's listener greets with
    `banner`; the gateway itself sends nothing first) or answers a request for a name
    no rule allows; blocked if it closes without an answer."""
    if banner:
        try:
            s.settimeout(1.0)
            if s.recv(len(banner)) == banner:
                return possible("redirected to %s, which relayed it to the probe's listener" % peer)
        except socket.timeout:
            pass
        except OSError:
            return blocked("closed", "gateway", "redirected to %s, closed without an answer" % peer)
    data = _gateway_closes(s)
    if data == b"":
        return blocked("closed", "gateway", "redirected to %s, closed without an answer" % peer)
    return possible("redirected to %s, which answered %r" % (peer, data))


@attempt("network.tcp_outside", "TCP connect to an address that is not loopback (this host's own)")
def _n_outside():
    """Stands in for any host on the internet: nothing in confine but the gateway may
    let it through, on any port. The target is this host's own address, where the probe
    listens (and greets every connection with a banner), so no packet leaves the machine
    even if the boundary is broken. Each port the profile grants (connect_tcp) is tried too.

    A refusal (ECONNREFUSED) means a TCP stack said no, or the gateway did: the
    supervisor rewrites every connect beyond the agent's loopback to it and refuses at
    once an address no rule could allow, after binding the socket to the agent's
    loopback (which a stack's refusal leaves unbound). On the listener's port a stack
    that was reached would have accepted."""
    o = CFG.get("outside_net") or {}
    if not o:
        raise Skip("this host has no address but loopback")
    host = o["address"]
    first = None
    for port in [o["tcp_port"]] + [p for p in CFG.get("connect_tcp", []) if p != o["tcp_port"]]:
        s, res = _inet(socket.AF_INET, socket.SOCK_STREAM)
        if res:
            return res
        s.settimeout(1.0)
        try:
            s.connect((host, port))
            peer = s.getpeername()[0]
            if peer == host:
                return possible("connected to %s:%d" % (host, port))
            if port == 53:
                # every port-53 destination is rewritten to confine's DNS server
                got = _confines_resolver(s, "rewritten to %s:%d" % s.getpeername()[:2])
            else:
                got = _through_gateway(s, peer, o.get("banner", "").encode())
            if got["result"] != "blocked":
                return got
            first = first or got
        except socket.timeout:
            return possible("no refusal: the connect to %s:%d is still waiting" % (host, port))
        except OSError as e:
            ref = _net_refusal(e, "%s:%d" % (host, port))
            if ref is None and e.errno == errno.ECONNREFUSED and _handed_to_gateway(s):
                ref = blocked(e.errno, "gateway", "the gateway refused %s:%d" % (host, port))
            elif ref is None and e.errno == errno.ECONNREFUSED and port == o["tcp_port"]:
                # a TCP stack reached there would have accepted
                ref = blocked(e.errno, by_sys(e.errno), "refused before %s:%d, where the probe listens"
                              % (host, port))
            if ref is None:
                return possible("the connect to %s:%d reached a TCP stack (%s): not refused by confine, so "
                                "any host is reachable on port %d" % (host, port, ename(e.errno), port))
            first = first or ref
        finally:
            s.close()
    return first


def _dns_query(name, qid):
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack("!HH", 1, 1)


@attempt("network.dns_outside", "DNS query for a name no rule allows, to a resolver other than confine's")
def _n_dns_outside():
    """A resolver that is not confine's (the probe's own, on this host's own address)
    would answer anything, so query names could carry data out. Blocked when the query
    cannot be sent or is answered NXDOMAIN/REFUSED (confine's answer for a name no rule
    allows); possible when the probe's resolver answers. Nothing leaves the machine."""
    o = CFG.get("outside_net") or {}
    if not o:
        raise Skip("this host has no address but loopback")
    dst = (o["address"], o["dns_port"])
    s, res = _inet(socket.AF_INET, socket.SOCK_DGRAM)
    if res:
        return res
    s.settimeout(2.0)
    qid = int.from_bytes(os.urandom(2), "big")
    try:
        s.sendto(_dns_query("exfil-%s.confine-probe.invalid" % CFG.get("rand", "x"), qid), dst)
        data = s.recv(512)
    except socket.timeout:
        return possible("the query was sent to %s:%d and not refused (no answer)" % dst)
    except OSError as e:
        ref = _net_refusal(e, "%s:%d" % dst, udp=True)
        return ref or possible("the query was sent to %s:%d (%s)" % (dst + (ename(e.errno),)))
    finally:
        s.close()
    if len(data) >= 12 and data[:2] == qid.to_bytes(2, "big"):
        rcode = data[3] & 0x0F
        if rcode in (3, 5):
            return blocked("NXDOMAIN" if rcode == 3 else "REFUSED", "gateway (DNS)")
        if o.get("dns_answer") and socket.inet_aton(o["dns_answer"]) in data:
            return possible("a resolver outside confine answered %s" % o["dns_answer"])
    return possible("an answer came back from %s:%d" % dst)


# ------------------------------------------------ files that run later

def by_guard(err, path):
    """EACCES on a workdir path Landlock lets the agent write: the protected-path
    guard (confine/protect/guard.py) refused the name."""
    if err in (errno.EACCES, errno.EPERM) and (path + "/").startswith(WORKDIR.rstrip("/") + "/"):
        return "protected-path guard"
    return by_fs(err, path)


PLANTED = "# written by confine probe (harmless)\n"
# What an exclusive workdir's plants hold where the exit check judges content (a
# config a new repository may keep if its keys are safe): what it must not keep.
PLANTED_BY_NAME = {"config": "[core]\n\tfsmonitor = true confine-probe-harmless\n",
                   ".gitmodules": '[submodule "x"]\n\tpath = x\n\turl = ext::true\n'}


def _at_exit(detail, paths):
    """Possible while the agent runs; in an exclusive workdir the plants (path, the
    content written or None) are left for the exit check, and run.py says blocked
    if none is in the workdir as planted after it."""
    r = possible(detail)
    if EXCLUSIVE:
        r["exit_check"] = [p if isinstance(p, list) else [p, None] for p in paths]
    return r


def _plant(targets):
    """targets: (path, how) with how in create (makedirs + write), append (open an
    existing file for writing, write nothing), create_unlink (a new file, removed).
    Possible if any works; otherwise blocked with the first error. In an exclusive
    workdir a new name is left in place for the exit check (_at_exit)."""
    first, done, held, left = None, [], [], []
    for path, how in targets:
        try:
            text = PLANTED_BY_NAME.get(os.path.basename(path), PLANTED) if EXCLUSIVE else PLANTED
            if how == "create":
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
            elif how == "append":
                _open_close(path, os.O_WRONLY | os.O_APPEND)
                done.append("opened %s for writing (nothing written)" % path)
                continue
            elif EXCLUSIVE:
                with open(path, "x") as f:      # left for the exit check: with content
                    f.write(text)
            else:
                _open_close(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            # The name guard holds a new protected file outside the workdir
            # (protect/held.py): the call works, the name never appears.
            if not os.path.lexists(path):
                held.append(path)
                continue
            if EXCLUSIVE and (path + "/").startswith(WORKDIR.rstrip("/") + "/"):
                left.append([path, text])
                continue
            if how == "create":
                done.append("wrote " + path)
            else:
                os.unlink(path)
                done.append("created %s (removed)" % path)
        except OSError as e:
            first = first or (e.errno, path)
            continue
    if done:
        return possible("; ".join(done))
    if left:
        return _at_exit("created " + ", ".join(p for p, _ in left) + " while the agent ran", left)
    if held and first is None:
        return blocked("held", "protected-path guard",
                       "%s: held outside the workdir (confine held)" % held[0])
    if first is None:
        raise Skip("nothing to try")
    return blocked(first[0], by_guard(first[0], first[1]), first[1])


def _in_workdir(rel, dir_only=False):
    """A harmless attempt on the real workdir: an existing file is opened for
    writing (nothing written); a missing one is created and removed when its
    directory exists; inside an existing directory a new file is created and removed."""
    p = os.path.join(WORKDIR, rel)
    if dir_only:
        if os.path.isdir(p):
            return [(os.path.join(p, "confine-probe-" + RAND), "create_unlink")]
        return []
    if os.path.isfile(p):
        return [(p, "append")]
    if not os.path.lexists(p) and os.path.isdir(os.path.dirname(p)):
        return [(p, "create_unlink")]
    return []


def _nested(*rels):
    base = os.path.join(scratch(), "nested")
    return [(os.path.join(base, r), "create") for r in rels]


@attempt("later.git_hooks", "write a git hook (.git/hooks, nested repositories too)")
def _l_hooks():
    return _plant(_in_workdir(".git/hooks", dir_only=True)
                  + _nested(".git/hooks/post-checkout", "vendor/x/.git/hooks/pre-commit"))


@attempt("later.git_config", "write git configuration (.git/config, .gitmodules)")
def _l_gitconfig():
    return _plant(_in_workdir(".git/config") + _in_workdir(".gitmodules")
                  + _nested(".git/config", ".gitmodules"))


@attempt("later.git_rename", "plant .git by renaming a prepared directory")
def _l_rename():
    base = os.path.join(scratch(), "renamed")
    prep = os.path.join(base, "prep")
    try:
        os.makedirs(os.path.join(prep, "hooks"))
        with open(os.path.join(prep, "hooks", "post-checkout"), "w") as f:
            f.write("# written by confine probe (harmless)\n")
    except OSError as e:
        return blocked(e.errno, by_fs(e.errno, prep), "preparing the directory failed")
    try:
        os.rename(prep, os.path.join(base, ".git"))
    except OSError as e:
        return blocked(e.errno, by_guard(e.errno, os.path.join(base, ".git")))
    return _at_exit("renamed a prepared directory to .git (hooks included)",
                    [os.path.join(base, ".git", "hooks", "post-checkout")])


@attempt("later.envrc", "write .envrc (direnv)")
def _l_envrc():
    return _plant(_in_workdir(".envrc") + _nested(".envrc"))


@attempt("later.editor", "write editor task files (.vscode/, .idea/)")
def _l_editor():
    return _plant(_in_workdir(".vscode", dir_only=True) + _in_workdir(".idea", dir_only=True)
                  + _nested(".vscode/tasks.json", ".idea/workspace.xml"))


@attempt("later.shell_rc", "write shell start-up files in the workdir (.bashrc, .profile)")
def _l_rc():
    return _plant(_in_workdir(".bashrc") + _nested(".bashrc", ".profile"))


@attempt("later.agent_config", "write agent configuration (.mcp.json, .claude/)")
def _l_agent():
    return _plant(_in_workdir(".mcp.json") + _in_workdir(".claude", dir_only=True)
                  + _nested(".mcp.json", ".claude/settings.json", ".claude/commands/x.md"))


@attempt("later.home_agent_hooks",
         "write agent hooks and config in HOME (~/.claude/settings.json, commands/, ~/.codex/config.toml)")
def _l_home_agent():
    # Agent profiles grant the agent's own directory in HOME; what runs later there
    # must stay read-only (confine/policy/runlater.py). Harmless: existing files are
    # opened for writing with nothing written, new names removed at once.
    targets = []
    for rel in (".claude/settings.json", ".claude/settings.local.json",
                ".codex/config.toml"):
        p = os.path.join(HOME, rel)
        if os.path.isfile(p):
            targets.append((p, "append"))
        elif not os.path.lexists(p) and os.path.isdir(os.path.dirname(p)):
            targets.append((p, "create_unlink"))
    for rel in (".claude/commands", ".claude/agents", ".claude/hooks", ".codex/rules"):
        p = os.path.join(HOME, rel)
        if os.path.isdir(p):
            targets.append((os.path.join(p, "confine-probe-" + RAND), "create_unlink"))
    if not targets:
        raise Skip("no ~/.claude or ~/.codex in HOME")
    return _plant(targets)


@attempt("later.symlink_trick", "write through a new symlink that names a protected file")
def _l_symlink():
    base = os.path.join(scratch(), "trick")
    os.makedirs(base, exist_ok=True)
    link = os.path.join(base, "innocent")
    os.symlink(".envrc", link)
    try:
        with open(link, "w") as f:
            f.write("# written by confine probe (harmless)\n")
    except OSError as e:
        return blocked(e.errno, by_guard(e.errno, os.path.join(base, ".envrc")))
    if not os.path.lexists(os.path.join(base, ".envrc")):
        return blocked("held", "protected-path guard", "judged as %s/.envrc: held outside the "
                       "workdir" % base)
    return _at_exit("created %s through the symlink %s" % (os.path.join(base, ".envrc"), link),
                    [os.path.join(base, ".envrc")])


@attempt("later.gitfile", "point git elsewhere with a .git file (gitdir: a prepared directory)")
def _l_gitfile():
    base = os.path.join(scratch(), "gitfile")
    prep = os.path.join(base, "elsewhere", "hooks")
    os.makedirs(prep, exist_ok=True)
    os.makedirs(os.path.join(base, "repo"), exist_ok=True)
    target = os.path.join(base, "repo", ".git")
    try:
        with open(target, "w") as f:
            f.write("gitdir: %s\n" % os.path.dirname(prep))
        # The name guard makes a .git file without a name and puts it in place
        # at the next mediated call, once its content is checked: make one.
        with open(os.path.join(base, "after"), "w"):
            pass
    except OSError as e:
        return blocked(e.errno, by_guard(e.errno, target))
    if CONFINED and not os.path.lexists(target):
        return blocked("never appeared", "protected-path guard", "%s was written without a name "
                       "and never put in place (it points outside .git/worktrees/ and "
                       ".git/modules/)" % target)
    if EXCLUSIVE:
        # what the pointer brings: the exit check judges the directory it names
        hook = os.path.join(prep, "post-checkout")
        with open(hook, "w") as f:
            f.write(PLANTED)
        return _at_exit("wrote %s pointing at %s, with a hook there" % (target,
                        os.path.dirname(prep)), [hook])
    return possible("wrote %s pointing at %s" % (target, os.path.dirname(prep)))


# A change nothing refuses at the call, because it is not a protected name: confine's exit
# check finds it after the run, reverts it and reports it.  Such an attempt says "blocked"
# with the exit check as the mechanism only when it is confined (an unconfined run has no
# exit check: there it is possible).
_EXIT = "exit check (reverted and reported when the agent exits)"


def _after_exit(detail):
    if not CONFINED:
        return possible(detail)
    return blocked("ok", _EXIT, detail + "; the call worked while running: confine's exit check "
                   "puts it back and names it on stderr")


@attempt("later.hidden_bare_repo", "hide a bare repository with core.pager under .git/objects, "
         "reached through a symlink")
def _l_hidden_bare():
    base = os.path.join(scratch(), "hidden")
    bare = os.path.join(base, ".git", "objects", "zz", "b")
    try:
        for d in ("objects", "refs/heads"):
            os.makedirs(os.path.join(bare, d))
        with open(os.path.join(bare, "HEAD"), "w") as f:
            f.write("ref: refs/heads/main\n")
        with open(os.path.join(bare, "config"), "w") as f:
            f.write("[core]\n\tbare = true\n\tpager = true confine-probe-harmless\n")
        os.symlink(os.path.join(".git", "objects", "zz", "b"), os.path.join(base, "tools"))
    except OSError as e:
        return blocked(e.errno, by_guard(e.errno, bare))
    return _after_exit("made %s with core.pager and the symlink %s/tools to it" % (bare, base))


@attempt("later.modes", "chmod 0777 a git directory and the directory above it")
def _l_modes():
    base = os.path.join(scratch(), "modes")
    gd = os.path.join(base, ".git")
    try:
        for d in ("objects", "refs"):
            os.makedirs(os.path.join(gd, d))
        with open(os.path.join(gd, "HEAD"), "w") as f:
            f.write("ref: refs/heads/main\n")
        os.chmod(gd, 0o777)
        os.chmod(base, 0o777)
    except OSError as e:
        return blocked(e.errno, by_guard(e.errno, gd))
    return _after_exit("chmod 0777 %s and %s" % (gd, base))


@attempt("later.deleted_suffix", "plant protected names in a directory named 'x (deleted)'")
def _l_deleted_suffix():
    # /proc/self/fd names such a live directory like a deleted one: the guard
    # must judge where it is, not give up on the name.
    base = os.path.join(scratch(), "x (deleted)")
    os.makedirs(base, exist_ok=True)
    got = _plant([(os.path.join(base, ".envrc"), "create"),
                  (os.path.join(base, ".claude", "settings.json"), "create")])
    if got["result"] != "blocked":
        return got
    prep = os.path.join(base, "prep")
    try:
        os.makedirs(os.path.join(prep, "hooks"), exist_ok=True)
        os.rename(prep, os.path.join(base, ".git"))
    except OSError as e:
        return blocked(e.errno, by_guard(e.errno, os.path.join(base, ".git")))
    return _at_exit("renamed a prepared directory to %s/.git" % base,
                    [os.path.join(base, ".git", "hooks")])


@attempt("later.long_path", "plant .envrc deeper than PATH_MAX (no path reads back)")
def _l_long_path():
    d = os.open(scratch(), os.O_PATH | os.O_DIRECTORY)
    rel = []
    try:
        for _ in range(24):                       # 24 x 200 characters > PATH_MAX
            name = "p" * 200
            try:
                os.mkdir(name, dir_fd=d)
            except FileExistsError:
                pass
            n = os.open(name, os.O_PATH | os.O_DIRECTORY, dir_fd=d)
            os.close(d)
            d = n
            rel.append(name)
        where = os.path.join(scratch(), *rel, ".envrc")
        try:
            fd = os.open(".envrc", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=d)
        except OSError as e:
            return blocked(e.errno, by_guard(e.errno, where), "%d directories deep" % len(rel))
        os.close(fd)
        if EXCLUSIVE:
            return _at_exit("created .envrc %d directories deep" % len(rel), [where])
        try:
            os.unlink(".envrc", dir_fd=d)
        except FileNotFoundError:       # held outside the workdir (protect/held.py)
            return blocked("held", "protected-path guard", "%d directories deep: held outside "
                           "the workdir" % len(rel))
        return possible("created .envrc %d directories deep (removed)" % len(rel))
    finally:
        os.close(d)


@attempt("later.case_variant", "plant protected names in other case (.ENVRC, .MCP.json, .CLAUDE/)")
def _l_case_variant():
    got = _plant(_nested(".ENVRC", ".MCP.json", ".CLAUDE/settings.json", ".Git/hooks/pre-commit",
                         ".vscode/TASKS.json"))
    if not (EXCLUSIVE and got.get("exit_check")):
        return got
    # An exclusive workdir keeps names as spelled (the exit check compares them so):
    # harmless only while no directory compares names without case, and none may
    # become one (the ioctl that sets the casefold flag on an empty directory).
    import fcntl
    empty = os.path.join(scratch(), "casefold")
    os.makedirs(empty, exist_ok=True)
    fd = os.open(empty, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            flags = struct.unpack("=i", fcntl.ioctl(fd, 0x80086601, b"\0" * 8)[:4])[0]
            fcntl.ioctl(fd, 0x40086602, struct.pack("=q", flags | 0x40000000))
        except OSError as e:
            err = e.errno
        else:
            return possible("set the casefold flag on %s: %s there opens .envrc" % (empty, ".ENVRC"))
    finally:
        os.close(fd)
    if err in (errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL):
        why = "this filesystem has no case-insensitive directories"
    elif err == errno.EPERM:
        why = "the flag ioctls are refused in an exclusive workdir"
    else:
        return got
    return blocked(err, "seccomp (inode flags) + exit check",
                   "the names stay as spelled, which no tool opens for the protected ones: " + why)


# ------------------------------------------------------------ main

class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _run(fn):
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main():
    signal.signal(signal.SIGALRM, _alarm)
    t0 = time.monotonic()
    _make_scratch()
    out = {"battery": 1, "facts": {
        "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
        "no_new_privs": STATUS.get("NoNewPrivs"), "seccomp": STATUS.get("Seccomp"),
        "cap_eff": STATUS.get("CapEff"), "cap_bnd": STATUS.get("CapBnd"),
        "cwd": os.getcwd(), "python": sys.version.split()[0], "scratch": SCRATCH,
    }, "sanity": [], "attempts": []}
    for aid, title, fn in SANITY:
        try:
            detail, ok = _run(fn), True
        except Exception as e:  # noqa: BLE001 - every failure is a failed check
            detail, ok = "%s: %s" % (type(e).__name__, e), False
        out["sanity"].append({"id": aid, "title": title, "ok": ok, "detail": detail})
    only = set(CFG.get("only") or ())
    for aid, group, title, fn in ATTEMPTS:
        if only and aid not in only and group not in only:
            continue
        t = time.monotonic()
        try:
            res = _run(fn)
        except Skip as e:
            res = skipped(str(e))
        except _Timeout:
            res = {"result": "error", "seen": None, "mechanism": None, "detail": "timed out"}
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(sys.exc_info()[2])
            where = "line %d" % tb[-1].lineno if tb else ""
            res = {"result": "error", "seen": None, "mechanism": None,
                   "detail": "%s: %s (%s)" % (type(e).__name__, e, where)}
        res.update({"id": aid, "group": group, "title": title,
                    "ms": round((time.monotonic() - t) * 1000, 1)})
        out["attempts"].append(res)
    out["facts"]["seconds"] = round(time.monotonic() - t0, 3)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

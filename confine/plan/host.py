"""What this machine can enforce, read once per run and handed to the planner.

The planner is pure: everything it needs to know about the kernel comes in as
a frozen HostFacts, so it can be unit-tested with any host one cares to
describe. `HostFacts.read` is the only place that asks the kernel.

Test-only knobs (they can only take a protection away, so confine then refuses
unless the caller accepts the loss by name):
  CONFINE_TEST_LANDLOCK_ABI_MAX=N   believe the kernel has Landlock ABI <= N
                                    (read in kernel/landlock.py)
  CONFINE_TEST_NO_NAMESPACES=1      believe mount/pid namespaces are unavailable
"""
from __future__ import annotations

import os
import stat
from hashlib import sha256

from ..record import dataclass

NO_NAMESPACES_ENV = "CONFINE_TEST_NO_NAMESPACES"


@dataclass(frozen=True)
class HostFacts:
    landlock_abi: int
    seccomp_filter: bool
    seccomp_user_notif: bool
    namespaces: bool          # private mount + pid namespaces work for this caller
    net_namespace: bool = False   # ... and a private network namespace inside them
    apparmor: bool = False    # AppArmor enabled
    selinux: bool = False     # SELinux enabled
    cgroup: str | None = None                 # where a run's cgroup (v2) can be made
    cgroup_controllers: tuple[str, ...] = ()  # of pids, memory: usable by that cgroup
    seccomp_listener_busy: bool = False       # an inherited filter holds the one listener
    root_mounts: bool = True                  # started as root, confine may mount (tmp_size)
    pidfd_getfd: bool = True  # the supervisor may take a child's descriptors (container
                              # runtimes refuse it without CAP_SYS_PTRACE)
    # CAP_SYS_PTRACE: the supervisor may read the memory and take the descriptors
    # of a process of another uid (not root in a container: Docker's, podman's,
    # Kubernetes' defaults leave it out)
    ptrace_others: bool = True

    @classmethod
    def read(cls, as_root: bool) -> HostFacts:
        from ..kernel import caps, cgroup, landlock, lsm, seccomp
        sc_filter, sc_notif = seccomp.available()
        cg = cgroup.parent_for_run(as_root)
        return cls(landlock_abi=landlock.kernel_abi(),
                   seccomp_filter=sc_filter, seccomp_user_notif=sc_notif,
                   namespaces=namespaces_available(as_root),
                   net_namespace=net_namespace_available(as_root),
                   apparmor=lsm.apparmor_enabled(), selinux=lsm.selinux_enabled(),
                   cgroup=cg, cgroup_controllers=cgroup.controllers(cg) if cg else (),
                   seccomp_listener_busy=seccomp.listener_busy(),
                   # a root that could make the mount namespace may mount: no second fork
                   root_mounts=as_root and (namespaces_available(as_root)
                                            or root_mounts_available()),
                   pidfd_getfd=pidfd_getfd_available(),
                   ptrace_others=caps.has_effective(caps.CAP_SYS_PTRACE))


_NS_CACHE: dict[bool, tuple[bool, bool]] = {}


def root_mounts_available() -> bool:
    """Root may make a mount namespace here (and so mount): not inside a container
    without CAP_SYS_ADMIN, whose seccomp profile refuses unshare and mount. Not
    affected by CONFINE_TEST_NO_NAMESPACES (which takes only the agent's away)."""
    from ..kernel import namespaces
    pid = os.fork()
    if pid == 0:
        try:
            namespaces.unshare(namespaces.CLONE_NEWNS)
            os._exit(0)
        except BaseException:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def namespaces_available(as_root: bool) -> bool:
    """Try, in a throw-away child, what the launcher's child will do."""
    return _probe(as_root)[0]


def net_namespace_available(as_root: bool) -> bool:
    """A private network namespace as well (tried in the same child)."""
    return _probe(as_root)[1]


def _probe(as_root: bool) -> tuple[bool, bool]:
    if os.environ.get(NO_NAMESPACES_ENV) == "1":
        return (False, False)
    if as_root not in _NS_CACHE:
        where = cache_dir() if not _under_seccomp() else None
        key = probe_key(as_root) if where is not None else ""
        if where is not None and read_cached(where, key):
            _NS_CACHE[as_root] = (True, True)
        else:
            _NS_CACHE[as_root] = _fork_probe(as_root)
            if where is not None and _NS_CACHE[as_root] == (True, True):
                write_cached(where, key)
    return _NS_CACHE[as_root]


# --- the namespace probe's result, kept between runs -----------------------------
# The probe forks twice and makes four namespaces (~10 ms of every start). Only its
# full success is kept, under a key of everything that decides it, in a directory
# of this uid that nobody else may write; anything that does not match exactly is
# ignored and the probe runs. A kept success cannot weaken a run: it only makes the
# child try the namespaces, and a child that cannot make them stops the run (125).
# A failure is never kept (it may be passing, e.g. namespaces used up for a moment).
CACHE_NAME = "host-facts-v1"
_KEY_FILES = ("/proc/sys/kernel/random/boot_id", "/proc/sys/user/max_user_namespaces",
              "/proc/sys/user/max_mnt_namespaces", "/proc/sys/user/max_pid_namespaces",
              "/proc/sys/user/max_net_namespaces", "/proc/sys/kernel/unprivileged_userns_clone",
              "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
              "/proc/self/attr/current", "/proc/self/uid_map", "/proc/self/gid_map")
_KEY_STATUS = (b"Uid:", b"Gid:", b"CapEff:", b"CapBnd:", b"NoNewPrivs:", b"Seccomp:",
               b"Seccomp_filters:")


def _under_seccomp() -> bool:
    """A seccomp filter above us (a container runtime's) may refuse unshare in ways
    no key here can name (two filters look alike in /proc): then probe every time."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Seccomp:"):
                    return line.split()[1] != b"0"
    except (OSError, IndexError):
        pass
    return True


def cache_dir() -> str | None:
    """Where this uid keeps it: /run/confine as root, else $XDG_RUNTIME_DIR/confine
    when that is this uid's own private directory; None: not kept."""
    if os.geteuid() == 0:
        return "/run/confine"
    rt = os.environ.get("XDG_RUNTIME_DIR")
    if not rt or not os.path.isabs(rt):
        return None
    try:
        st = os.lstat(rt)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return os.path.join(rt, "confine")


def probe_key(as_root: bool) -> str:
    """Everything the probe's answer depends on: this boot, the sysctls that allow
    namespaces, this process's own namespaces, credentials, seccomp state and LSM
    label, and the code that probes."""
    h = sha256(f"{as_root}\0{os.geteuid()}\0".encode())
    for path in _KEY_FILES:
        try:
            with open(path, "rb") as f:
                h.update(path.encode() + b"=" + f.read(4096) + b"\0")
        except OSError as e:
            h.update(f"{path}!{e.errno}\0".encode())
    for ns in ("user", "mnt", "pid", "net", "cgroup"):
        try:
            h.update(f"{ns}={os.readlink('/proc/self/ns/' + ns)}\0".encode())
        except OSError as e:
            h.update(f"{ns}!{e.errno}\0".encode())
    try:
        with open("/proc/self/status", "rb") as f:
            h.update(b"".join(ln for ln in f if ln.startswith(_KEY_STATUS)))
    except OSError:
        h.update(b"status!")
    from ..kernel import hostview, namespaces
    for mod in (__file__, namespaces.__file__, hostview.__file__):
        try:
            st = os.stat(mod or "")
            h.update(f"{mod}={st.st_ino}:{st.st_size}:{st.st_mtime_ns}\0".encode())
        except OSError:
            h.update(b"code!")
    return h.hexdigest()


def _own_private(st: os.stat_result, want_dir: bool) -> bool:
    kind = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    return kind and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def read_cached(where: str, key: str) -> bool:
    """Whether `where` holds a kept success for exactly this key, in a directory and
    a file of this uid that nobody else can write (no symlink followed)."""
    try:
        dfd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not _own_private(os.fstat(dfd), True):
            return False
        fd = os.open(CACHE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        try:
            if not _own_private(os.fstat(fd), False):
                return False
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return False
    finally:
        os.close(dfd)
    return data == f"namespaces ok {key}\n".encode()


def write_cached(where: str, key: str) -> None:
    """Keep a success (best effort: a failure only costs the next run the probe)."""
    try:
        try:
            os.mkdir(where, 0o700)
        except FileExistsError:
            pass
        dfd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    tmp = f".{CACHE_NAME}.{os.getpid()}"
    try:
        if not _own_private(os.fstat(dfd), True):
            return
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        try:
            os.write(fd, f"namespaces ok {key}\n".encode())
        finally:
            os.close(fd)
        os.rename(tmp, CACHE_NAME, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
    finally:
        os.close(dfd)


def _fork_probe(as_root: bool) -> tuple[bool, bool]:
    """Try, in a throw-away child, what the launcher's child will do."""
    from ..kernel import hostview, namespaces
    pid = os.fork()
    if pid == 0:
        try:
            namespaces.enter(userns=not as_root)
            namespaces.make_private()
            try:
                namespaces.unshare(namespaces.CLONE_NEWNET)
                net = 0
            except OSError:
                net = 2                  # everything else may still work
            namespaces.unshare(namespaces.CLONE_NEWPID)
            init = os.fork()
            if init == 0:
                try:
                    hostview.private_proc()
                    os._exit(0)
                except BaseException:
                    os._exit(1)
            code = os.waitstatus_to_exitcode(os.waitpid(init, 0)[1])
            os._exit(code if code else net)
        except BaseException:
            os._exit(1)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return (code in (0, 2), code == 0)


def pidfd_getfd_available() -> bool:
    """Whether this process may take a descriptor of its own child with
    pidfd_getfd (a seccomp filter above us, Yama or an LSM may refuse it).
    Asked of this process itself first (no fork on the start-up path): that
    answers for a seccomp filter, the usual refuser (Docker's profile). Only
    where Yama restricts ptrace beyond descendants (ptrace_scope >= 2), which
    a self-probe cannot see, is a child tried. An LSM refusal the probe missed
    fails the run at the listener's hand-off, with its reason (never a pass)."""
    from ..kernel import notify
    try:
        me = notify.pidfd_open(os.getpid())
        try:
            os.close(notify.pidfd_getfd(me, me))
        finally:
            os.close(me)
    except OSError:
        return False
    if _yama_scope() < 2:
        return True
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(w)
            os.read(r, 1)
        finally:
            os._exit(0)
    try:
        pidfd = notify.pidfd_open(pid)
        try:
            os.close(notify.pidfd_getfd(pidfd, r))
            return True
        finally:
            os.close(pidfd)
    except OSError:
        return False
    finally:
        os.close(w)
        os.close(r)
        os.waitpid(pid, 0)


def _yama_scope() -> int:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0

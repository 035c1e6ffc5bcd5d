"""The supervisor's system calls for answering seccomp user notifications.

Holds two groups, the only module in confine making these calls:

* the notification ioctls on the listener fd: receive (`recv`), answer
  (`respond`, `addfd_send`: install a descriptor in the agent and answer with
  it) and `id_valid` (is the notifying task still waiting in that call, so
  what was read from its memory still belongs to it);
* access to the notifying task, which the supervisor needs to act on a
  notification: pidfd_open/pidfd_getfd (take a copy of one of its fds),
  process_vm_readv (`read_mem`, `read_cstr`: read a path or sockaddr from its
  memory) and openat2 (open a path with RESOLVE_* limits).

Every failure raises OSError naming the call. The structures and ioctl
numbers are those of x86_64 and aarch64 (asm-generic ioctl encoding).
"""
from __future__ import annotations

import ctypes
import os
import threading

from .libc import check, libc

# x86_64 and aarch64 share the numbers of these newer syscalls.
SYS_pidfd_open = 434
SYS_pidfd_getfd = 438
SYS_openat2 = 437
SYS_process_vm_readv = 310 if os.uname().machine == "x86_64" else 270
SYS_process_vm_writev = 311 if os.uname().machine == "x86_64" else 271

PIDFD_THREAD = os.O_EXCL
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04

SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1


class SeccompData(ctypes.Structure):
    _fields_ = [("nr", ctypes.c_int), ("arch", ctypes.c_uint32),
                ("instruction_pointer", ctypes.c_uint64), ("args", ctypes.c_uint64 * 6)]


class Notif(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("pid", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("data", SeccompData)]


class NotifResp(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("val", ctypes.c_int64),
                ("error", ctypes.c_int32), ("flags", ctypes.c_uint32)]


class OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _ioc(d: int, nr: int, size: int) -> int:
    return (d << 30) | (size << 16) | (ord("!") << 8) | nr


IOCTL_RECV = _ioc(3, 0, ctypes.sizeof(Notif))
IOCTL_SEND = _ioc(3, 1, ctypes.sizeof(NotifResp))
IOCTL_ID_VALID = _ioc(1, 2, 8)


def recv(fd: int) -> Notif:
    n = Notif()
    check(libc.ioctl(fd, IOCTL_RECV, ctypes.byref(n)), "SECCOMP_IOCTL_NOTIF_RECV")
    return n


def respond(fd: int, nid: int, val: int = 0, error: int = 0, cont: bool = False) -> None:
    """error is a positive errno; the kernel wants it negated."""
    r = NotifResp(id=nid, val=val, error=-error if error else 0,
                  flags=SECCOMP_USER_NOTIF_FLAG_CONTINUE if cont else 0)
    check(libc.ioctl(fd, IOCTL_SEND, ctypes.byref(r)), "SECCOMP_IOCTL_NOTIF_SEND")


IOCTL_SET_FLAGS = _ioc(1, 4, 8)
SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP = 1


def sync_wake_up(fd: int) -> bool:
    """Ask the kernel (6.6 and later) to hand the CPU over directly at each
    notification and answer: the agent waits for the answer anyway, and a wake-up
    of a thread on another CPU (an interprocessor interrupt; on a VM, an exit to the
    hypervisor) was a large part of a mediated call's cost. Speed only: an older
    kernel's refusal changes nothing else (False)."""
    return bool(libc.ioctl(fd, IOCTL_SET_FLAGS,
                           ctypes.c_uint64(SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)) == 0)


def id_valid(fd: int, nid: int) -> bool:
    v = ctypes.c_uint64(nid)
    return bool(libc.ioctl(fd, IOCTL_ID_VALID, ctypes.byref(v)) == 0)


def pidfd_open(pid: int, flags: int = 0) -> int:
    return check(libc.syscall(SYS_pidfd_open, pid, flags), "pidfd_open")


def pidfd_getfd(pidfd: int, fd: int) -> int:
    return check(libc.syscall(SYS_pidfd_getfd, pidfd, fd, 0), "pidfd_getfd")


class _Reader(threading.local):
    """One page buffer and its two iovecs per thread, made once: a mediated
    call copies its path with one process_vm_readv and no ctypes objects made
    for it (those were a third of the copy's time)."""

    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(PAGE)
        self.iov = (IoVec * 2)()
        self.iov[0].iov_base = ctypes.addressof(self.buf)
        self.local = ctypes.byref(self.iov, 0)
        self.remote = ctypes.byref(self.iov, ctypes.sizeof(IoVec))

    def read(self, pid: int, addr: int, size: int) -> int:
        """Bytes copied of at most PAGE from addr into self.buf."""
        iov = self.iov
        iov[0].iov_len = size
        iov[1].iov_base = addr
        iov[1].iov_len = size
        return check(libc.syscall(SYS_process_vm_readv, pid, self.local, 1, self.remote, 1,
                                  _FLAGS0), "process_vm_readv")


PAGE = 4096
_reader = _Reader()
# syscall()'s seventh argument goes on the stack: a Python 0 would fill only
# the low 32 bits of that slot, and process_vm_readv refuses other flags (EINVAL).
_FLAGS0 = ctypes.c_long(0)


def read_mem(pid: int, addr: int, size: int) -> bytes:
    """Copy `size` bytes of another process's memory (ptrace access required)."""
    if size == 0:
        return b""
    if size <= PAGE:
        r = _reader
        if r.read(pid, addr, size) != size:
            raise OSError(14, "process_vm_readv: short read")
        return ctypes.string_at(r.buf, size)
    buf = ctypes.create_string_buffer(size)
    local = IoVec(ctypes.cast(buf, ctypes.c_void_p), size)
    remote = IoVec(ctypes.c_void_p(addr), size)
    n = check(libc.syscall(SYS_process_vm_readv, pid, ctypes.byref(local), 1,
                             ctypes.byref(remote), 1, _FLAGS0), "process_vm_readv")
    if n != size:
        raise OSError(14, "process_vm_readv: short read")
    return buf.raw


def write_mem(pid: int, addr: int, data: bytes) -> None:
    """Copy `data` into another process's memory (a mediated call's output)."""
    if not data:
        return
    buf = ctypes.create_string_buffer(data, len(data))
    local = IoVec(ctypes.cast(buf, ctypes.c_void_p), len(data))
    remote = IoVec(ctypes.c_void_p(addr), len(data))
    n = check(libc.syscall(SYS_process_vm_writev, pid, ctypes.byref(local), 1,
                             ctypes.byref(remote), 1, _FLAGS0), "process_vm_writev")
    if n != len(data):
        raise OSError(14, "process_vm_writev: short write")


_HOWS: dict[tuple[int, int], OpenHow] = {}


def openat2(path: str | bytes, flags: int, resolve: int, dirfd: int = -100) -> int:
    # One struct per (flags, resolve), never written after it is made (shared
    # by the broker's threads): the few combinations callers use are kept.
    how = _HOWS.get((flags, resolve))
    if how is None:
        how = OpenHow(flags=flags | os.O_CLOEXEC, mode=0, resolve=resolve)
        if len(_HOWS) < 64:
            _HOWS[(flags, resolve)] = how
    return check(libc.syscall(SYS_openat2, dirfd, path if isinstance(path, bytes)
                              else os.fsencode(path), ctypes.byref(how), _HOW_SIZE), "openat2")


_HOW_SIZE = ctypes.sizeof(OpenHow)
PATH_MAX = 4096
SECCOMP_ADDFD_FLAG_SEND = 2


class NotifAddfd(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("srcfd", ctypes.c_uint32),
                ("newfd", ctypes.c_uint32), ("newfd_flags", ctypes.c_uint32)]


IOCTL_ADDFD = _ioc(1, 3, ctypes.sizeof(NotifAddfd))


def addfd_send(fd: int, nid: int, srcfd: int, cloexec: bool) -> int:
    """Install srcfd in the notifying task as its lowest free descriptor and
    answer the notification with that number, atomically (Linux 5.14)."""
    a = NotifAddfd(id=nid, flags=SECCOMP_ADDFD_FLAG_SEND, srcfd=srcfd, newfd=0,
                   newfd_flags=os.O_CLOEXEC if cloexec else 0)
    return check(libc.ioctl(fd, IOCTL_ADDFD, ctypes.byref(a)), "SECCOMP_IOCTL_NOTIF_ADDFD")


def read_cstr(pid: int, addr: int, limit: int = PATH_MAX) -> bytes:
    """A NUL-terminated string from another process, page by page (the string
    may end just before an unmapped page). ENAMETOOLONG past `limit`."""
    if not addr:
        raise OSError(14, "bad address")
    r = _reader
    out = b""
    while len(out) < limit:
        take = min(PAGE - (addr + len(out)) % PAGE, limit - len(out))
        if r.read(pid, addr + len(out), take) != take:
            raise OSError(14, "process_vm_readv: short read")
        chunk = ctypes.string_at(r.buf, take)
        i = chunk.find(b"\0")
        if i >= 0:
            return out + chunk[:i]
        out += chunk
    raise OSError(36, "path too long")

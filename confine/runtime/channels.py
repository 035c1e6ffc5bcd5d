"""The descriptors that tie the child, the broker and the supervisor together
for seccomp user notification, and the broker's fork."""
from __future__ import annotations

import errno
import os
import signal
import socket
import time
from typing import Any

from ..kernel import caps, notify, seccomp

# imported before the fork: the broker cannot read confine's files after Landlock
from ..mediation import broker_main
from ..record import dataclass

# The notifying filter's raw BPF by (files, meta, bind, signals, dgram, exec): it depends
# on nothing else (confine's own syscall tables), so a Sandbox's runs build it once.
_PROGRAMS: dict[tuple[bool, bool, bool, bool, bool, bool], bytes] = {}


def _notify_program(files: bool, meta: bool, bind: bool, signals: bool,
                    dgram: bool = False, exec_: bool = False) -> bytes:
    key = (files, meta, bind, signals, dgram, exec_)
    got = _PROGRAMS.get(key)
    if got is None:
        got = _PROGRAMS[key] = seccomp.notify_program(seccomp.build_notify(
            files=files, meta=meta, bind=bind, signals=signals, dgram=dgram, exec_=exec_))
    return got


@dataclass
class MediationChannel:
    broker_sup: socket.socket      # supervisor's end of the broker socket
    broker_fd: int                 # broker's end (passed through the child)
    sync_r: int                    # child waits here for "go" after the listener hand-off
    sync_w: int
    guard: Any                     # the name guard (protect.guard.Guard) or None
    notify_program: bytes          # the notifying filter, raw BPF
    # What the child makes for the supervisor (the seccomp listener, the gateway's
    # sockets) travels as SCM_RIGHTS over this pair, never by pidfd_getfd: taking
    # a descriptor from a process of another uid needs CAP_SYS_PTRACE, which root
    # in a container (Docker's, podman's defaults) does not have, and the child
    # has dropped to the agent's uid before its listener exists.
    hand_sup: socket.socket
    hand_child: int
    # The undo keeper's pair (confine/undo/): the broker asks the supervisor to
    # keep a workdir file before it changes it; None/-1: nothing is kept.
    undo_sup: socket.socket | None = None
    undo_fd: int = -1
    undo_started: int = 0          # the keeper's start (ns): files born later are not asked about

    @classmethod
    def open(cls, guard: Any, files: bool, meta: bool = False,
             bind: bool = False, signals: bool = False,
             dgram: bool = False, exec_: bool = False, undo: int = 0) -> MediationChannel:
        """bind: bind and setsockopt are notified too (the supervisor cannot take
        the agent's sockets: mediation/sockfd.py); dgram: UDP sockets are refused by
        the notifying filter, so the refusal is said (no gateway); undo: the undo
        keeper's start (ns; 0: none): the broker asks it, the supervisor serves undo_sup."""
        sup, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sync_r, sync_w = os.pipe2(os.O_CLOEXEC)
        hsup, hchild = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        usup, uchild = (socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) if undo
                        else (None, None))
        return cls(broker_sup=sup, broker_fd=child.detach(), sync_r=sync_r, sync_w=sync_w,
                   guard=guard, hand_sup=hsup, hand_child=hchild.detach(),
                   notify_program=_notify_program(files, meta, bind, signals, dgram, exec_),
                   undo_sup=usup, undo_fd=uchild.detach() if uchild is not None else -1,
                   undo_started=undo)

    def child_fds(self) -> tuple[int, ...]:
        return (self.sync_r, self.broker_fd, self.hand_child) + (
            (self.undo_fd,) if self.undo_fd >= 0 else ())

    def close_supervisor_ends_in_child(self) -> None:
        self.broker_sup.close()
        os.close(self.sync_w)
        self.hand_sup.close()
        if self.undo_sup is not None:
            self.undo_sup.close()

    def close_child_ends(self) -> None:
        os.close(self.sync_r)
        os.close(self.broker_fd)
        os.close(self.hand_child)
        if self.undo_fd >= 0:
            os.close(self.undo_fd)

    def close_sync(self) -> None:
        os.close(self.sync_r)
        os.close(self.hand_child)

    def hand_over(self, fds: list[int], what: bytes) -> None:
        """The child's side: pass descriptors to the supervisor (what: a tag the
        supervisor checks, so that one kind is never taken for another)."""
        try:
            with socket.socket(fileno=os.dup(self.hand_child)) as s:
                socket.send_fds(s, [what], fds)
        except OSError as e:
            which = "the seccomp listener" if what == b"L" else "the gateway's sockets"
            raise OSError(e.errno, f"cannot pass {which} to the supervisor (sendmsg with "
                          f"SCM_RIGHTS: {e.strerror}); a container's seccomp profile must "
                          "allow sendmsg") from None

    def take(self, what: bytes, count: int) -> list[int]:
        """The supervisor's side: the descriptors the child passed, sent before the
        status message that announces them, so already queued (nothing queued: the
        child died or lied, OSError). Exactly count of them under the tag what."""
        self.hand_sup.setblocking(False)
        try:
            msg, fds, flags, _ = socket.recv_fds(self.hand_sup, 16, count + 1)
        except BlockingIOError:
            raise OSError(errno.EBADMSG, "the child passed no descriptor") from None
        for f in fds:
            os.set_inheritable(f, False)
        if msg != what or len(fds) != count or flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
            for f in fds:
                os.close(f)
            raise OSError(errno.EBADMSG, f"the child passed {len(fds)} descriptors tagged "
                          f"{msg[:16]!r}, not {count} tagged {what!r}")
        return fds

    def take_listener(self) -> int:
        """The seccomp listener the child passed; anything else fails the run."""
        nfd = self.take(b"L", 1)[0]
        try:
            kind = os.readlink(f"/proc/self/fd/{nfd}")
        except OSError:
            kind = ""
        if kind != "anon_inode:seccomp notify":
            os.close(nfd)
            raise OSError(errno.EBADMSG, f"the child passed {kind or 'an unknown descriptor'}, "
                          "not a seccomp listener")
        notify.sync_wake_up(nfd)    # speed only (kernel 6.6+): the mediator runs on the caller's CPU
        return nfd

    def start_broker(self, filters: list[Any], status_w: int, supervisor: int,
                     in_pid_ns: bool = False) -> None:
        """Fork the broker inside the agent's Landlock domain (see mediation/). A
        double fork re-parents it to the supervisor, a child subreaper; in a pid
        namespace it stays the child of the namespace's init."""
        first = os.fork()
        if first == 0:
            try:
                if in_pid_ns:
                    supervisor = 1
                elif os.fork() != 0:
                    os._exit(0)
                os.close(status_w)
                os.close(self.sync_r)
                os.close(self.hand_child)
                for _ in range(2000):
                    if os.getppid() == supervisor:
                        break
                    time.sleep(0.0005)
                caps.set_pdeathsig(signal.SIGKILL)
                if os.getppid() != supervisor:
                    os._exit(0)
                caps.set_dumpable(False)
                for f in filters:
                    seccomp.load(f)
                broker_main(socket.socket(fileno=self.broker_fd), self.guard,
                            socket.socket(fileno=self.undo_fd) if self.undo_fd >= 0 else None,
                            self.undo_started)
            finally:
                os._exit(0)
        if not in_pid_ns:
            os.waitpid(first, 0)
        os.close(self.broker_fd)
        if self.undo_fd >= 0:
            os.close(self.undo_fd)
            self.undo_fd = -1

"""The descriptors that tie the child, the broker and the supervisor together
for seccomp user notification, and the broker's fork."""
from __future__ import annotations

import errno
import os
import signal
import socket
import time
from typing import Any

from ..kernel import caps, seccomp

# imported before the fork: the broker cannot read confine's files after Landlock
from ..mediation import broker_main
from ..record import dataclass

# The notifying filter's raw BPF by (files, meta, bind, signals, dgram): it depends
# on nothing else (confine's own syscall tables), so a Sandbox's runs build it once.
_PROGRAMS: dict[tuple[bool, bool, bool, bool, bool], bytes] = {}


def _notify_program(files: bool, meta: bool, bind: bool, signals: bool,
                    dgram: bool = False) -> bytes:
    key = (files, meta, bind, signals, dgram)
    got = _PROGRAMS.get(key)
    if got is None:
        got = _PROGRAMS[key] = seccomp.notify_program(seccomp.build_notify(
            files=files, meta=meta, bind=bind, signals=signals, dgram=dgram))
    return got


@dataclass
class MediationChannel:
    broker_sup: socket.socket      # supervisor's end of the broker socket
    broker_fd: int                 # broker's end (passed through the child)
    sync_r: int                    # child waits here for "go" after the listener hand-off
    sync_w: int
    guard: Any                     # the name guard (protect.guard.Guard) or None
    notify_program: bytes          # the notifying filter, raw BPF
    # Where the host refuses pidfd_getfd (container runtimes without
    # CAP_SYS_PTRACE, Docker's default), the listener travels to the supervisor
    # as SCM_RIGHTS instead (hand_over/take_listener).
    hand_sup: socket.socket | None = None
    hand_child: int = -1

    @classmethod
    def open(cls, guard: Any, files: bool, meta: bool = False,
             handoff: bool = False, signals: bool = False,
             dgram: bool = False) -> MediationChannel:
        sup, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sync_r, sync_w = os.pipe2(os.O_CLOEXEC)
        hsup, hchild = (socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) if handoff
                        else (None, None))
        return cls(broker_sup=sup, broker_fd=child.detach(), sync_r=sync_r, sync_w=sync_w,
                   guard=guard, hand_sup=hsup,
                   hand_child=hchild.detach() if hchild is not None else -1,
                   notify_program=_notify_program(files, meta, handoff, signals, dgram))

    @property
    def handoff(self) -> bool:
        return self.hand_sup is not None

    def child_fds(self) -> tuple[int, ...]:
        return (self.sync_r, self.broker_fd) + ((self.hand_child,) if self.handoff else ())

    def close_supervisor_ends_in_child(self) -> None:
        self.broker_sup.close()
        os.close(self.sync_w)
        if self.hand_sup is not None:
            self.hand_sup.close()

    def close_child_ends(self) -> None:
        os.close(self.sync_r)
        os.close(self.broker_fd)
        if self.handoff:
            os.close(self.hand_child)

    def close_sync(self) -> None:
        os.close(self.sync_r)
        if self.handoff:
            os.close(self.hand_child)

    def hand_over(self, listener: int) -> None:
        """The child's side: pass the notify listener to the supervisor."""
        with socket.socket(fileno=os.dup(self.hand_child)) as s:
            socket.send_fds(s, [b"L"], [listener])

    def take_listener(self) -> int:
        """The supervisor's side: the listener the child passed (sent before the
        status message that announces it, so it is already queued)."""
        assert self.hand_sup is not None
        self.hand_sup.setblocking(False)
        _, fds, _, _ = socket.recv_fds(self.hand_sup, 16, 1)
        if len(fds) != 1:
            for f in fds:
                os.close(f)
            raise OSError(errno.EBADMSG, "no seccomp listener received from the child")
        return fds[0]

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
                if self.handoff:
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
                broker_main(socket.socket(fileno=self.broker_fd), self.guard)
            finally:
                os._exit(0)
        if not in_pid_ns:
            os.waitpid(first, 0)
        os.close(self.broker_fd)

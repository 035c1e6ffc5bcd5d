"""The broker: performs the mediated calls the supervisor approved or handed on.

It is forked by the agent's child after Landlock was applied, so it lives in
the agent's own Landlock domain (TCP port rules and abstract-socket scoping
apply to it exactly as to the agent), carries the ordinary deny filter but not
the notifying one, and is not dumpable (the agent can neither ptrace it nor
steal its descriptors). Socket calls are performed here on the supervisor's
copies of the agent's socket, address and data; file calls are judged by the
name guard and performed in files.py.
"""
from __future__ import annotations

import ctypes
import errno
import os
import queue
import socket
import struct
import threading
from typing import TYPE_CHECKING, NoReturn

from confine.kernel import notify
from confine.kernel.libc import libc

from .files import FileBroker
from .wire import (
    FILE_OPS,
    MAX_FDS,
    REQUEST_MAX,
    SOCKET_OPS,
    FileRequest,
    MsgHdr,
    Op,
    Reply,
    SocketRequest,
    request_head,
    rights_control,
)

if TYPE_CHECKING:
    from confine.protect.guard import Guard


def broker_main(sock: socket.socket, guard: Guard | None = None) -> NoReturn:
    """Serve requests until the supervisor closes its end. Never returns."""
    lock = threading.Lock()
    os.umask(0)      # file requests carry the agent's umask and apply it themselves
    files = FileBroker(guard)

    def reply(rid: int, answer: Reply) -> None:
        msg = answer.encode(rid)
        with lock:
            try:
                if answer.fd is None:
                    sock.send(msg)
                else:
                    socket.send_fds(sock, [msg], [answer.fd])
            except OSError:
                os._exit(0)

    def file_call(rid: int, body: bytes, fds: list[int]) -> None:
        answer = None
        try:
            answer = files.handle(FileRequest.unpack(body), fds)
            reply(rid, answer)
        finally:
            _close(fds + ([answer.fd] if answer is not None and answer.fd is not None else []))

    def socket_call(rid: int, body: bytes, fds: list[int]) -> None:
        try:
            reply(rid, _socket_call(SocketRequest.unpack(body), fds))
        finally:
            _close(fds)

    def handle(body: bytes, fds: list[int]) -> None:
        rid, op = request_head(body)
        if op in SOCKET_OPS:
            socket_call(rid, body, fds)
        elif op in FILE_OPS:
            file_call(rid, body, fds)
        else:
            _close(fds)
            reply(rid, Reply(-1, errno.ENOSYS))

    # Workers are reused (starting a thread costs more than most calls); a call
    # that blocks (a FIFO opened for writing) holds only its own worker, since
    # every request gets an idle worker reserved for it or a new one.
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    idle = [0]
    idle_lock = threading.Lock()

    def worker() -> None:
        while True:
            body, fds = jobs.get()
            try:
                handle(body, fds)
            except Exception:  # noqa: BLE001 - answer rather than leave the agent waiting
                reply(request_head(body)[0], Reply(-1, errno.EIO))
            with idle_lock:
                idle[0] += 1

    while True:
        try:
            body, fds, _, _ = socket.recv_fds(sock, REQUEST_MAX, MAX_FDS)
        except OSError:
            os._exit(0)
        if not body:
            os._exit(0)
        with idle_lock:
            spawn = idle[0] == 0
            if not spawn:
                idle[0] -= 1
        jobs.put((body, fds))
        if spawn:
            threading.Thread(target=worker, daemon=True).start()


def _socket_call(req: SocketRequest, fds: list[int]) -> Reply:
    """fds: the socket, then the pinned socket file if req.has_opath, then
    the descriptors to pass."""
    sockfd, extra = fds[0], fds[1:]
    name = req.name
    if req.has_opath:
        # Connecting through /proc/self/fd reaches the very file the supervisor
        # pinned, whatever was renamed or swapped in at its name since.
        path = f"/proc/self/fd/{extra[0]}".encode()
        name = struct.pack("<H", socket.AF_UNIX) + path + b"\0"
        extra = extra[1:]
    nbuf = ctypes.create_string_buffer(name, len(name)) if name else None
    nlen = len(name)
    ctypes.set_errno(0)
    if req.op == Op.CONNECT:
        ret = libc.connect(sockfd, nbuf, nlen)
    elif req.op == Op.SENDTO:
        ret = libc.sendto(sockfd, req.data, ctypes.c_size_t(len(req.data)), req.flags, nbuf, nlen)
    else:
        data = req.data
        iov = (ctypes.c_char * max(len(data), 1)).from_buffer_copy(data or b"\0")
        iovec = notify.IoVec(ctypes.cast(iov, ctypes.c_void_p), len(data))
        ctrl, clen = rights_control(extra)
        hdr = MsgHdr(ctypes.cast(nbuf, ctypes.c_void_p) if nbuf else None, nlen,
                     ctypes.cast(ctypes.pointer(iovec), ctypes.c_void_p), 1,
                     ctypes.cast(ctrl, ctypes.c_void_p) if ctrl else None, clen, 0)
        ret = libc.sendmsg(sockfd, ctypes.byref(hdr), req.flags)
    return Reply(ret, ctypes.get_errno() if ret < 0 else 0)


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass

"""The supervisor's send of a request to the broker (Mediator._send): on the
socket object without a timeout while the socket takes it, through the timed
one when it is full, so a broker that catches up within the timeout still
gets the request, and one that does not gets the agent its `lost` errno."""
from __future__ import annotations

import errno
import os
import socket
import threading
import time

from confine.mediation import supervisor


class _Probe(supervisor.Mediator):
    """Only what _send uses: the two sockets and the pending table."""

    def __init__(self, broker: socket.socket):   # noqa: D107 - no listener, no broker
        self.broker = broker
        self.broker.settimeout(2)
        self.post = socket.socket(fileno=os.dup(broker.fileno()))
        self.pending = {}
        self.prune_at = 1 << 30
        self.next_id = 1
        self.answered: list[tuple[int, int]] = []

    def _respond(self, nid: int, val: int = 0, error: int = 0) -> None:
        self.answered.append((nid, error))


def _fill(s: socket.socket) -> int:
    """Datagrams sent until the socket would block."""
    n = 0
    while True:
        try:
            s.send(b"x" * 4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return n
        n += 1


def test_a_full_socket_that_drains_in_time_still_takes_the_request():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    m = _Probe(a)
    try:
        queued = _fill(m.post)
        got: list[bytes] = []

        def drain():
            time.sleep(0.3)
            for _ in range(queued + 1):
                got.append(b.recv(8192))
        t = threading.Thread(target=drain)
        t.start()
        assert m._send(7, lambda rid: b"req%d" % rid, [], False, errno.EIO)
        t.join()
        assert got[-1] == b"req1" and not m.answered and 1 in m.pending
    finally:
        m.post.close()
        a.close()
        b.close()


def test_a_socket_that_stays_full_answers_lost():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    m = _Probe(a)
    m.broker.settimeout(0.2)
    try:
        _fill(m.post)
        assert not m._send(7, lambda rid: b"req", [], False, errno.EIO)
        assert m.answered == [(7, errno.EIO)] and not m.pending
    finally:
        m.post.close()
        a.close()
        b.close()

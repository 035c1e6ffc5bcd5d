"""The ioctl allowlist (no mount namespace, Landlock below ABI 5) never lets
through what the deny filter refuses or what sends a signal, and its program
refuses any other request with EACCES (checked by running it in a child)."""
from __future__ import annotations

import errno
import fcntl
import os
import termios

from confine.kernel.seccomp import IOCTLS, ioctls, load


def test_allowlist_excludes_denied_and_signalling_requests():
    denied = {num for _, num, _ in IOCTLS}
    assert not denied & ioctls.ALLOWED_NUMBERS
    for num in (0x8901, 0x8902, 0x40045436, 0x5437, 0x5457, 0x5418):  # FIOSETOWN SIOCSPGRP TIOCSIG
        assert num not in ioctls.ALLOWED_NUMBERS                       # TIOCVHANGUP TIOCSLCKTRMIOS TIOCMSET


def test_the_listener_requests_the_broker_makes_pass():
    from confine.kernel import notify
    for num in (notify.IOCTL_RECV, notify.IOCTL_SEND, notify.IOCTL_ID_VALID, notify.IOCTL_ADDFD):
        assert num in ioctls.ALLOWED_NUMBERS, hex(num)


def test_program_refuses_other_requests_in_a_child():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            from confine.kernel import caps
            caps.set_no_new_privs()
            load(ioctls.program())
            out = []
            fd = os.open("/dev/null", os.O_RDWR)
            for req in (0x1234, termios.TIOCGWINSZ):
                try:
                    fcntl.ioctl(fd, req, bytes(8))
                    out.append("ok")
                except OSError as e:
                    out.append(errno.errorcode[e.errno])
            p0, _ = os.pipe()
            fcntl.ioctl(p0, termios.FIONREAD, bytes(4))
            out.append("fionread")
            os.write(w, ",".join(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 200).decode()
    os.waitpid(pid, 0)
    assert got == "EACCES,ENOTTY,fionread", got

"""Copying a mediated call's strings out of the agent (kernel.notify.read_cstr,
read_mem) with the per-thread buffer: a string that ends just before an
unmapped page, one that runs into it, one longer than the limit, threads
copying at once, and a copy larger than the buffer. Read from a forked
process, as the supervisor reads the agent."""
from __future__ import annotations

import ctypes
import mmap
import os
import signal
import threading

import pytest

from confine.kernel import notify

PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]


@pytest.fixture
def child():
    """A forked process whose memory holds, at `base`, two pages: the first
    readable, the second PROT_NONE; it waits until killed."""
    base = libc.mmap(None, 2 * PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    assert libc.mprotect(ctypes.c_void_p(base + PAGE), PAGE, 0) == 0          # PROT_NONE
    big = ctypes.create_string_buffer(bytes(range(256)) * 40)   # 10240 bytes
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, b"x")
            signal.pause()
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"x"
    os.close(r)
    try:
        yield pid, base, ctypes.addressof(big), big.raw
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        libc.munmap(ctypes.c_void_p(base), 2 * PAGE)


def _put(addr: int, data: bytes) -> None:
    ctypes.memmove(addr, data, len(data))


def test_strings_at_a_page_end(child):
    pid, base, _, _ = child
    end = base + PAGE
    me = os.getpid()        # the same mapping here: written and read in this process
    _put(end - 4, b"abc\0")
    assert notify.read_cstr(me, end - 4) == b"abc"
    _put(end - 3, b"xyz")                      # no NUL before the unmapped page
    with pytest.raises(OSError) as e:
        notify.read_cstr(me, end - 3)
    assert e.value.errno == 14
    _put(base, b"a" * 100 + b"\0")
    with pytest.raises(OSError) as e:
        notify.read_cstr(me, base, limit=50)
    assert e.value.errno == 36
    assert notify.read_cstr(me, base, limit=101) == b"a" * 100
    with pytest.raises(OSError):
        notify.read_mem(me, end - 2, 4)        # runs into the unmapped page
    assert notify.read_mem(me, end - 4, 4) == b"axyz"
    assert pid > 0


def test_another_process_and_sizes(child):
    pid, _, big, raw = child
    assert notify.read_mem(pid, big, 5) == raw[:5]
    assert notify.read_mem(pid, big + 1, PAGE) == raw[1:PAGE + 1]
    assert notify.read_mem(pid, big, len(raw)) == raw          # larger than one page
    assert notify.read_mem(pid, big, 0) == b""
    # a string across a page boundary of the other process: bytes 1..255 then NUL
    assert notify.read_cstr(pid, big + 1) == raw[1:256]


def test_threads_copy_at_once(child):
    pid, _, big, raw = child
    bad: list[tuple[int, bytes]] = []

    def worker(k: int) -> None:
        for i in range(300):
            off = (k * 37 + i) % 200 + 1
            got = notify.read_cstr(pid, big + off)
            if got != raw[off:256]:
                bad.append((off, got))
            got = notify.read_mem(pid, big + off, 64)
            if got != raw[off:off + 64]:
                bad.append((off, got))
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad

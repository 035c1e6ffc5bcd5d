"""The read-only host view (kernel/hostview.py): inside a default run every
mount is read-only but the writable paths' own binds and the run's private
/dev/shm, /dev/pts and /proc. Read from the agent's /proc/self/mountinfo, so
every mount counts, those covered by another mount too; on this host that is
a couple of hundred. Control: the workdir's bind is read-write and writable."""
from __future__ import annotations

import os

PRIVATE = ("/dev/shm", "/dev/pts", "/dev/ptmx", "/proc")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def test_every_other_mount_is_read_only(sandbox):
    p = sandbox.run(["/bin/sh", "-c", 'echo ok > written && echo "$TMPDIR" && echo "$HOME" '
                     "&& cat /proc/self/mountinfo"])
    assert p.returncode == 0, p.stderr
    tmp, home, *lines = p.stdout.splitlines()
    writable = [sandbox.workdir, tmp, home]
    mounts = []
    for line in lines:
        f = line.split(" ")
        point = f[4].replace("\\040", " ")
        mounts.append((point, f[5].split(",")))
    wrong = [m for m, o in mounts if "ro" not in o
             and not any(_under(m, w) for w in writable) and m not in PRIVATE]
    assert not wrong, wrong
    # control: the workdir is a read-write bind and the write above went through
    assert any(m == sandbox.workdir and "rw" in o for m, o in mounts), mounts
    assert os.path.exists(os.path.join(sandbox.workdir, "written"))
    assert len(mounts) > len(writable) + len(PRIVATE)

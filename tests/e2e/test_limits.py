"""Resource limits of a run (issue 10, item 12).

One agent makes every attempt (threads until refused, a file past the size
limit, a private mapping past the memory limit, descriptors past the limit,
files in /dev/shm and TMPDIR past their sizes) under a profile with small
limits, and, as the control, under the same profile with every limit lifted
(`unlimited`): the same identity, the same sandbox, only the limits differ.
Root and unprivileged, with and without the namespace layers; where a limit
cannot be enforced (shm without a mount namespace, TMPDIR started
unprivileged) --dry-run must say so instead.
"""
from __future__ import annotations

import json
import os
import textwrap

import pytest
from conftest import PY, last_json

pytestmark = pytest.mark.e2e

MiB = 1 << 20
SMALL = dict(processes=64, memory="256M", open_files=64, file_size="4M", tmp_size="1M",
             shm_size="1M")

AGENT = textwrap.dedent("""
    import ctypes, errno, json, os, signal, threading
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    MiB = 1 << 20
    out = {}
    # threads count as tasks, and cost little: a bounded "fork bomb"
    threading.stack_size(64 * 1024)
    stop, started = threading.Event(), []
    try:
        while len(started) < 300:
            t = threading.Thread(target=stop.wait)
            t.start()
            started.append(t)
        out["threads"] = len(started)
    except RuntimeError:
        out["threads"] = len(started)
    stop.set()
    for t in started:
        t.join()
    def write(path, n):
        try:
            with open(path, "wb") as f:
                for _ in range(n):
                    f.write(b"x" * MiB)
                    f.flush()
            return "ok"
        except OSError as e:
            return errno.errorcode[e.errno]
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
    out["file"] = write("big.bin", 5)
    out["tmp"] = write(os.environ["TMPDIR"] + "/big.bin", 2)
    out["shm"] = write("/dev/shm/big.bin", 2)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    size = 512 * MiB   # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS|NORESERVE, never touched
    p = libc.mmap(None, size, 3, 0x02 | 0x20 | 0x4000, -1, 0)
    out["mmap"] = "ok" if p not in (None, ctypes.c_void_p(-1).value) else \\
        errno.errorcode[ctypes.get_errno()]
    fds = []
    try:
        while len(fds) < 100:
            fds.append(os.open("/dev/null", os.O_RDONLY))
        out["fds"] = "ok"
    except OSError as e:
        out["fds"] = errno.errorcode[e.errno]
    for fd in fds:
        os.close(fd)
    print(json.dumps(out))
""")


def _profile(sb, name: str, limits: dict) -> str:
    path = os.path.join(sb.workdir, f"{name}.yaml")
    body = "extends: default\nlimits:\n" + "".join(f"  {k}: {v}\n" for k, v in limits.items())
    with open(path, "w") as f:
        f.write(body)
    if os.geteuid() == 0:
        os.chown(path, sb.pw.pw_uid, sb.pw.pw_gid)
    return path


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_limits_bound_the_agent(sandbox, layers):
    sb = sandbox.without_namespaces() if layers == "landlock" else sandbox
    small = _profile(sb, "small", SMALL)
    lifted = _profile(sb, "lifted", {k: "unlimited" for k in SMALL})
    runs = {}
    for name, prof in (("small", small), ("lifted", lifted)):
        p = sb.run([PY, "-c", AGENT], "-p", prof, timeout=120)
        assert p.returncode == 0, p.stderr
        runs[name] = last_json(p.stdout)
    ctl, got = runs["lifted"], runs["small"]
    # controls: without limits every attempt succeeds in the same sandbox
    # (without a mount namespace the host's /dev/shm is not granted at all)
    shm = "ok" if layers == "all" else "EACCES"
    assert ctl == {"threads": 300, "file": "ok", "tmp": "ok", "shm": shm, "mmap": "ok",
                   "fds": "ok"}, ctl
    # RLIMIT_NPROC: the uid's tasks at the start plus 64; tasks of the same uid
    # elsewhere that end during the run free a few more
    assert got["threads"] < 100, got
    assert got["file"] == "EFBIG", got
    assert got["mmap"] == "ENOMEM", got
    assert got["fds"] == "EMFILE", got
    dry = sb.confine("exec", "--dry-run", "--json", "-w", sb.workdir, "-p", small, *sb.opts,
                     "--", "true")
    mech = {k: v["mechanism"] for k, v in json.loads(dry.stdout)["limits"].items()}
    if layers == "all":
        assert got["shm"] == "ENOSPC", got
    else:
        assert mech["shm_size"].startswith("NOT enforced"), mech
        assert got["shm"] == "EACCES", got
    if sb.mode == "root":
        assert got["tmp"] == "ENOSPC", got
    else:
        assert mech["tmp_size"].startswith("NOT enforced"), mech

"""What start-up keeps between runs (issue 13, goal 1): the namespace probe's
success in /run/confine (plan/host.py). A kept answer that is tampered with,
foreign-owned or stale is never believed: the probe runs again and the run is
confined as always; the agent can write none of it."""
from __future__ import annotations

import os

import pytest

CACHE = "/run/confine/host-facts-v1"


def _ns(sandbox) -> str:
    p = sandbox.run(["/bin/sh", "-c", "readlink /proc/self/ns/mnt"])
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def _real(root_sandbox) -> str:
    _ns(root_sandbox)                     # a run that probes (or uses a good answer)
    with open(CACHE) as f:
        return f.read()


@pytest.mark.parametrize("how", ["tampered", "stale", "foreign-owned", "world-writable"])
def test_a_bad_kept_answer_is_probed_again_and_the_run_is_confined(root_sandbox, how):
    good = _real(root_sandbox)
    assert good.startswith("namespaces ok ")
    if how == "tampered":
        text, owner, mode = "namespaces ok " + "0" * 64 + "\n", 0, 0o600
    elif how == "stale":               # a key of another boot or another confine
        text, owner, mode = good.replace("ok ", "ok f", 1)[:-2] + "\n", 0, 0o600
    elif how == "foreign-owned":
        text, owner, mode = good, 65534, 0o600
    else:
        text, owner, mode = good, 0, 0o666
    tmp = CACHE + ".test"
    with open(tmp, "w") as f:
        f.write(text)
    os.chown(tmp, owner, owner)
    os.chmod(tmp, mode)
    os.rename(tmp, CACHE)
    outside = os.readlink("/proc/self/ns/mnt")
    assert _ns(root_sandbox) != outside                  # still in its own mount namespace
    st = os.stat(CACHE)
    with open(CACHE) as f:
        assert f.read() == good                           # probed again and kept anew
    assert st.st_uid == 0 and st.st_mode & 0o777 == 0o600


@pytest.mark.parametrize("who", ["root_sandbox", "root_agent"])
def test_the_agent_cannot_write_what_is_kept(request, root_sandbox, who):
    """Inside, as the test account and as root itself (--user root), the kept
    answer and its directory refuse writes, new names and renames. Control:
    root outside appends to it (below)."""
    _real(root_sandbox)
    box = request.getfixturevalue(who)
    p, r = box.probe('attempt("write", lambda: opened(P["f"], os.O_WRONLY))\n'
                     'attempt("create", lambda: opened(P["d"] + "/x", os.O_WRONLY | os.O_CREAT))\n'
                     'attempt("rename", lambda: os.rename(P["f"], P["d"] + "/y"))',
                     {"f": CACHE, "d": os.path.dirname(CACHE)})
    assert r is not None, p.stderr
    assert all(v != "ok" for v in r.values()), r
    with open(CACHE, "a"):
        pass                                             # control: root outside may

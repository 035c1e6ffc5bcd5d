"""How the agent starts (runtime/child.py: forked by pid 1 in a pid namespace,
or the child itself, then exec): with every restriction the steps applied and
nothing of the launcher's signal state (no blocked signal, none ignored, the C
library's own 32 and 33 included: posix_spawn would leave those ignored).
Controls: the same reads outside show no seccomp filter, and a pipe's reader
that exits ends the writer with SIGPIPE there too."""
from __future__ import annotations

# the agent reads its own status (a shell would clear its signal mask first)
STATUS = ["grep", "-E", "^(NoNewPrivs|Seccomp|SigBlk|SigIgn|Uid):", "/proc/self/status"]
# a shell cannot undo an ignored SIGPIPE it inherits: the writer's status shows it
PIPE = ["/bin/sh", "-c", "{ (yes; echo $? >&3) | head -c 2 >/dev/null; } 3>&1"]


def _fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = v.split()[0] if v.split() else ""
    return out


def _check(sb) -> None:
    p = sb.run(STATUS)
    assert p.returncode == 0, p.stderr
    f = _fields(p.stdout)
    o = _fields(sb.outside(STATUS).stdout)
    assert f["NoNewPrivs"] == "1" and f["Seccomp"] == "2", f
    assert o["Seccomp"] == "0", o
    assert f["Uid"] == str(sb.agent.pw_uid), f
    assert int(f["SigBlk"], 16) == int(o["SigBlk"], 16) == 0, (f, o)
    assert int(f["SigIgn"], 16) == int(o["SigIgn"], 16) == 0, (f, o)
    p = sb.run(PIPE)
    assert p.stdout.strip() == "141", p                        # 128 + SIGPIPE
    assert sb.outside(PIPE).stdout.strip() == "141"


def test_the_agent_has_every_restriction_and_default_signals(sandbox):
    _check(sandbox)


def test_landlock_only_run_starts_the_agent_the_same(sandbox):
    _check(sandbox.without_namespaces())

"""How the agent starts (runtime/child.py: forked by pid 1 in a pid namespace,
or the child itself, then exec): with every restriction the steps applied and
nothing of the launcher's signal state (no blocked signal, none ignored, the C
library's own 32 and 33 included: posix_spawn would leave those ignored).
The launcher is started ignoring SIGHUP, SIGINT and SIGQUIT (as under nohup, in a
background job). Controls: the same reads outside (every disposition reset first)
show no seccomp filter, and a pipe's reader that exits ends the writer with
SIGPIPE there too."""
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


def _defaults() -> None:
    """In the child before exec: every disposition back to its default, so the
    reading does not depend on what the test runner inherited (nohup, a
    background job of a shell ignore SIGHUP, SIGINT, SIGQUIT)."""
    import signal
    for n in range(1, signal.NSIG):
        if n not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(n, signal.SIG_DFL)
            except (OSError, ValueError):
                pass                              # the C library's own (32, 33)


def _ignoring() -> None:
    """A launcher started under nohup as a background job: the agent must still
    get none of these ignored."""
    import signal
    _defaults()
    for n in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        signal.signal(n, signal.SIG_IGN)


def _check(sb) -> None:
    import subprocess
    p = subprocess.run(sb.exec_cmd(STATUS), capture_output=True, text=True, timeout=60,
                       cwd=sb.workdir, preexec_fn=_ignoring)
    assert p.returncode == 0, p.stderr
    f = _fields(p.stdout)
    o = _fields(subprocess.run(sb.outside_cmd(STATUS), capture_output=True, text=True,
                               timeout=60, cwd=sb.workdir, preexec_fn=_defaults).stdout)
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


def test_a_nul_byte_in_the_command_or_environment_is_refused(sandbox):
    """As exec refuses it: a NUL byte in an argument or a value is never cut short
    there (that would run another command than the one asked). Control: the same
    command without it runs."""
    import json
    import subprocess

    from conftest import PREFIX
    code = (
        "import json, sys, confine\n"
        "from confine.errors import ConfineError\n"
        "out = []\n"
        "for argv, env in ((['/bin/echo', 'a\\0b'], ()), (['/bin/sh', '-c', 'echo $X'], ('X=a\\0b',)),"
        " (['/bin/echo', 'ab'], ())):\n"
        "    try:\n"
        "        r = confine.Sandbox(workdir=sys.argv[1], env=env).run(argv, capture=True)\n"
        "        out.append([r.status, r.stdout.decode()])\n"
        "    except ConfineError as e:\n"
        "        out.append([e.status, str(e)])\n"
        "print(json.dumps(out))\n")
    argv = sandbox.cmd([])[:-1] + [f"{PREFIX}/bin/python", "-c", code, sandbox.workdir]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=sandbox.workdir)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert [o[0] for o in out] == [125, 125, 0], out
    assert "null byte" in out[0][1] and "null byte" in out[1][1] and out[2][1] == "ab\n", out

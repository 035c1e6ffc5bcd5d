"""The `confine` command line, end to end: exit codes, bad input, --dry-run
--json, check, profile commands, environment scrubbing, signals and exit
status, the supervisor's death, leftover processes, degraded kernels.

Every refusal is paired with the corrected invocation, which runs.
"""
from __future__ import annotations

import json
import os
import pwd
import select
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

try:  # tests/ as a package or as a plain directory
    from .conftest import (
        PY,
        Sandbox,
        _alive,
        host_pid,
        kill_quietly,
        landlock_abi,
        make_workdir,
        wait_dead,
    )
except ImportError:
    from conftest import (
        PY,
        Sandbox,
        _alive,
        host_pid,
        kill_quietly,
        landlock_abi,
        make_workdir,
        wait_dead,
    )

pytestmark = pytest.mark.usefixtures("confine_bin")

RAN = ["sh", "-c", "echo RAN"]


def _one_line(p) -> str:
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"want exactly one stderr line, got {len(lines)}:\n{p.stderr}"
    return lines[0]


@pytest.fixture
def profile_dir():
    """A directory of profile files every account can read."""
    d = tempfile.mkdtemp(prefix="confine-prof-", dir="/tmp")
    os.chmod(d, 0o755)

    def write(name: str, text: str) -> str:
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
        return path
    yield write
    shutil.rmtree(d, ignore_errors=True)


# =====================================================================================
# Exit codes
# =====================================================================================

def test_exit_status_of_the_command(sandbox):
    assert sandbox.run(["true"]).returncode == 0
    assert sandbox.run(["false"]).returncode == 1
    p = sandbox.run(["sh", "-c", "echo out; echo err >&2; exit 42"])
    assert p.returncode == 42 and p.stdout == "out\n", p
    # the command's own stderr first; confine may add one line for a failed run where
    # Landlock's refusals cannot be seen (events.summary), nothing else
    err = p.stderr.splitlines()
    assert err[0] == "err" and all(ln.startswith("confine: exit status 42: ") for ln in err[1:]) \
        and len(err) <= 2, p


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGSEGV, signal.SIGUSR1])
def test_exit_128_plus_signal(sandbox, sig):
    p = sandbox.run(["sh", "-c", f"kill -{sig.name[3:]} $$"])
    assert p.returncode == 128 + sig, p
    assert "confine:" not in p.stderr, p.stderr


def test_exit_127_not_found(sandbox):
    for cmd in (["confine-no-such-command"], ["/nonexistent/bin/tool"]):
        p = sandbox.run(cmd)
        assert p.returncode == 127, p
        line = _one_line(p)
        assert cmd[0] in line and "not found" in line, line


def test_exit_126_not_executable(sandbox):
    """A file without the execute bit (and a directory) in the workdir: 126.
    Control: the same file made executable runs."""
    script = os.path.join(sandbox.workdir, "tool.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho tool-ran\n")
    os.chmod(script, 0o644)
    os.chown(script, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    os.mkdir(os.path.join(sandbox.workdir, "adir"))
    p = sandbox.run(["./tool.sh"])
    assert p.returncode == 126, p
    line = _one_line(p)
    assert "tool.sh" in line and "cannot execute" in line, line
    p = sandbox.run(["./adir"])
    assert p.returncode == 126, p
    _one_line(p)
    os.chmod(script, 0o755)
    p = sandbox.run(["./tool.sh"])
    assert p.returncode == 0 and p.stdout == "tool-ran\n", p


def test_exit_126_executable_outside_the_grants(sandbox, planted_home):
    """An executable under HOME (not readable inside): 126 with a hint to --read.
    Control: with --read on its directory it runs."""
    bindir = os.path.join(planted_home, "bin")
    os.makedirs(bindir, exist_ok=True)
    tool = os.path.join(bindir, "mytool")
    with open(tool, "w") as f:
        f.write("#!/bin/sh\necho mytool-ran\n")
    os.chmod(tool, 0o755)
    for p in (bindir, tool):
        os.chown(p, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    p = sandbox.run([tool])
    assert p.returncode == 126, p
    assert "--read" in _one_line(p)
    try:
        p = sandbox.run([tool], "--read", bindir)
        assert p.returncode == 0 and p.stdout == "mytool-ran\n", p
    finally:
        shutil.rmtree(bindir, ignore_errors=True)


def test_usage_error_is_125(sandbox):
    p = sandbox.confine("exec")                       # no command
    assert p.returncode == 125, p
    p = sandbox.confine("exec", "--no-such-option", "--", "true")
    assert p.returncode == 125, p
    p = sandbox.confine("exec", "--json", "--", "true")   # --json without --dry-run
    assert p.returncode == 125, p
    _one_line(p)


# =====================================================================================
# Bad input: exit 125, exactly one line on stderr, the command does not run;
# the corrected invocation runs.
# =====================================================================================

BAD_YAML = "description: bad\nfilesystem:\n  read:\n    - /usr\n   - /etc\n"
UNKNOWN_KEY = "description: x\nextends: default\nfilesytem:\n  read: [/usr]\n"
UNKNOWN_NESTED = "extends: default\nfilesystem:\n  read:\n    - /usr\n  raed: [/etc]\n"
GOOD = "description: fine\nextends: default\nfilesystem:\n  read: [/usr]\n"


def _refused(p, *needles):
    assert p.returncode == 125, f"want 125, got {p.returncode}\n{p.stdout}\n{p.stderr}"
    line = _one_line(p)
    assert line.startswith("confine: "), line
    for n in needles:
        assert n in line, f"{n!r} not in {line!r}"
    assert "RAN" not in p.stdout, "the command ran although confine refused"
    return line


def test_bad_profiles(sandbox, profile_dir):
    good = profile_dir("good.yaml", GOOD)
    assert sandbox.run(RAN, "-p", good).stdout == "RAN\n", "control: a valid profile file runs"
    assert sandbox.run(RAN, "-p", "strict").stdout == "RAN\n", "control: a built-in name runs"

    _refused(sandbox.run(RAN, "-p", "no-such-profile"), "no-such-profile", "default")
    _refused(sandbox.run(RAN, "-p", "defualt"), "defualt", "did you mean 'default'")
    bad = profile_dir("bad.yaml", BAD_YAML)
    _refused(sandbox.run(RAN, "-p", bad), "bad.yaml:5", "YAML")
    key = profile_dir("key.yaml", UNKNOWN_KEY)
    _refused(sandbox.run(RAN, "-p", key), "key.yaml:3", "filesytem", "did you mean 'filesystem'")
    nested = profile_dir("nested.yaml", UNKNOWN_NESTED)
    _refused(sandbox.run(RAN, "-p", nested), "nested.yaml:5", "raed", "did you mean 'read'")
    missing = profile_dir("missing.yaml", "extends: default\nfilesystem:\n  read: [/no/such/dir]\n")
    _refused(sandbox.run(RAN, "-p", missing), "missing.yaml:3", "/no/such/dir")
    _refused(sandbox.run(RAN, "-p", "/tmp/confine-no-such-profile.yaml"), "does not exist")


def test_bad_workdirs(sandbox, test_user):
    _refused(sandbox.confine("exec", "-w", "/", "--", *RAN), "refusing workdir /", "--force-workdir")
    for d in ("/etc", "/usr/lib", "/proc", "/home", "/tmp"):
        _refused(sandbox.confine("exec", "-w", d, "--", *RAN), d, "system directory")
    _refused(sandbox.confine("exec", "-w", test_user.pw_dir, "--", *RAN), test_user.pw_dir, "home")
    if sandbox.mode == "root":   # the caller's own $HOME
        _refused(sandbox.confine("exec", "-w", "/root", "--", *RAN), "/root")
    _refused(sandbox.confine("exec", "-w", "/tmp/confine-no-such-dir", "--", *RAN),
             "/tmp/confine-no-such-dir", "does not exist")
    # a file is not a workdir
    f = os.path.join(sandbox.workdir, "file")
    open(f, "w").close()
    p = sandbox.confine("exec", "-w", f, "--", *RAN)
    assert p.returncode == 125 and "RAN" not in p.stdout, p
    # control: a project directory runs
    assert sandbox.run(RAN).stdout == "RAN\n"


def test_workdir_inside_a_secret_refused(user_sandbox, planted_home):
    """A workdir under ~/.ssh would hand the agent the keys."""
    d = os.path.join(planted_home, ".ssh", "proj")
    os.makedirs(d, exist_ok=True)
    os.chown(d, user_sandbox.agent.pw_uid, user_sandbox.agent.pw_gid)
    try:
        _refused(user_sandbox.confine("exec", "-w", d, "--", *RAN), ".ssh")
    finally:
        os.rmdir(d)


def test_bad_grants(sandbox):
    _refused(sandbox.run(RAN, "--read", "/tmp/confine-no-such-path"), "/tmp/confine-no-such-path")
    _refused(sandbox.run(RAN, "--write", "/tmp/confine-no-such-path"), "/tmp/confine-no-such-path")
    _refused(sandbox.run(RAN, "--read", "relative/path"), "relative/path")
    _refused(sandbox.run(RAN, "--env", "BAD-NAME=1"), "BAD-NAME")
    assert sandbox.run(RAN, "--read", "/usr/share").stdout == "RAN\n", "control"


def test_user_option_needs_root(user_sandbox):
    _refused(user_sandbox.run(RAN, "--user", "root"), "--user", "root")
    # control: naming oneself is fine
    p = user_sandbox.run(["id", "-un"], "--user", user_sandbox.pw.pw_name)
    assert p.returncode == 0 and p.stdout.strip() == user_sandbox.pw.pw_name, p


def test_user_option_unknown_user(root_sandbox):
    _refused(root_sandbox.run(RAN, "--user", "confine-no-such-user"), "confine-no-such-user")
    p = root_sandbox.run(["id", "-un"], "--user", root_sandbox.pw.pw_name)
    assert p.returncode == 0 and p.stdout.strip() == root_sandbox.pw.pw_name, p


def test_root_owned_workdir_needs_user(confine_bin, test_user):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    wd = make_workdir(pwd.getpwuid(0))
    try:
        sb = Sandbox("root", test_user, wd)
        _refused(sb.run(["id", "-u"]), "--user", "root")
        p = sb.run(["id", "-u"], "--user", "root")
        assert p.returncode == 0 and p.stdout.strip() == "0", p
        p = sb.run(["id", "-u"], "--user", test_user.pw_name)
        assert p.returncode == 0 and p.stdout.strip() == str(test_user.pw_uid), p
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def test_started_as_root_runs_as_workdir_owner(root_sandbox):
    p = root_sandbox.run(["id"])
    assert p.returncode == 0, p
    assert f"uid={root_sandbox.pw.pw_uid}(" in p.stdout and "gid=" in p.stdout
    assert "uid=0" not in p.stdout and "groups=" in p.stdout
    assert p.stdout.split("groups=")[1].strip() == f"{root_sandbox.pw.pw_gid}({root_sandbox.pw.pw_name})"


# =====================================================================================
# --dry-run --json
# =====================================================================================

def test_dry_run_json(sandbox, planted_home):
    marker = os.path.join(sandbox.workdir, "marker")
    p = sandbox.run(["touch", marker], "--dry-run", "--json",
                    env_extra=["AWS_SECRET_ACCESS_KEY=dry-secret", "TZ=UTC"])
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert not os.path.exists(marker), "--dry-run ran the command"
    assert not os.path.exists(d["tmpdir"]), "--dry-run left its temp dir behind"
    assert d["command"] == ["touch", marker]
    assert d["workdir"] == sandbox.workdir
    # identity
    ident = d["identity"]
    assert ident["uid"] == sandbox.agent.pw_uid and ident["user"] == sandbox.agent.pw_name
    assert ident["supplementary_groups"] == []
    # landlock: every right the kernel knows is handled; grants as expected
    ll = d["landlock"]
    assert ll["abi"] == landlock_abi()
    assert {"write_file", "read_file", "execute", "truncate", "refer"} <= set(ll["handled_fs"])
    assert set(ll["handled_net"]) >= {"bind_tcp", "connect_tcp"}
    assert set(ll["scoped"]) >= {"abstract_unix_socket", "signal"}
    rules = {r["path"]: set(r["access"]) for r in ll["rules"]}
    assert "write_file" in rules[sandbox.workdir] and "make_reg" in rules[sandbox.workdir]
    assert "write_file" in rules[d["tmpdir"]]
    assert {"read_file", "execute"} <= rules["/usr"] and "write_file" not in rules["/usr"]
    for path, acc in rules.items():
        if "write_file" in acc:
            assert path in (sandbox.workdir, d["tmpdir"], d["agent_home"]) \
                or path.startswith("/dev/"), path
    assert not any(p.startswith(planted_home + "/.ssh") for p in rules)
    assert "/etc/shadow" not in rules and "/etc" not in rules   # carved out of /etc
    assert planted_home + "/.ssh" in ll["secrets"] and "/etc/shadow" in ll["secrets"]
    assert ll["tcp_ports"] == []
    # seccomp: every denied syscall is listed
    denied = {r["syscall"] for r in d["seccomp"]}
    for s in ("mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "clone", "clone3",
              "bpf", "perf_event_open", "io_uring_setup", "keyctl", "userfaultfd", "init_module",
              "finit_module", "kexec_load", "reboot", "swapon", "settimeofday", "syslog", "iopl",
              "personality", "mknod", "mknodat", "socket", "ioctl", "open_by_handle_at"):
        assert s in denied, f"{s} missing from the dry-run seccomp list"
    ioctls = " ".join(" ".join(r["args"]) for r in d["seccomp"] if r["syscall"] == "ioctl")
    for name in ("TIOCSTI", "TIOCLINUX", "BLKDISCARD", "BLKZEROOUT", "BLKPG", "SG_IO"):
        assert name in ioctls, name
    for r in d["seccomp"]:
        assert r["errno"] in ("EPERM", "ENOSYS", "EACCES"), r
    # environment: exactly what the agent gets
    env = d["environment"]
    # HOME is the agent's own home (tests/e2e/test_agent_home.py), in the agent account's
    assert env["HOME"] == d["agent_home"] and env["TMPDIR"] == d["tmpdir"]
    assert d["agent_home"].startswith(sandbox.agent.pw_dir + "/.local/state/confine/homes/")
    assert env["TZ"] == "UTC" and "PATH" in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert d["missing"] == []


def test_dry_run_matches_what_runs(sandbox):
    """The environment --dry-run --json shows is the one the command gets."""
    extra = ["TZ=UTC", "GITHUB_TOKEN=t0k3n", "EDITOR=vi"]
    d = json.loads(sandbox.run(["true"], "--dry-run", "--json", env_extra=extra).stdout)
    p = sandbox.run([PY, "-c", "import os,json; print(json.dumps(dict(os.environ)))"],
                    env_extra=extra)
    real = json.loads(p.stdout)
    real.pop("PWD", None)
    plan = dict(d["environment"])
    assert real.pop("TMPDIR").startswith("/tmp/confine-") and plan.pop("TMPDIR")
    for k in ("TMUX_TMPDIR", "SCREENDIR", "CONFINE_DELEGATE"):   # in the run's TMPDIR
        assert real.pop(k).startswith("/tmp/confine-") and plan.pop(k)
    assert real == plan


def test_dry_run_human(sandbox):
    p = sandbox.run(["true"], "--dry-run")
    assert p.returncode == 0, p.stderr
    for needle in ("landlock: ABI", sandbox.workdir, "seccomp:", "environment:", "identity:"):
        assert needle in p.stdout, needle


# =====================================================================================
# confine check, confine profile
# =====================================================================================

def test_check(sandbox):
    p = sandbox.confine("check", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["host"]["landlock"]["abi"] == landlock_abi()
    assert d["host"]["seccomp"]["filter"] is True
    names = {x["profile"] for x in d["profiles"]}
    assert {"default", "strict", "claude-code", "codex"} <= names
    assert all(x["enforceable"] for x in d["profiles"]), d["profiles"]
    human = sandbox.confine("check")
    assert human.returncode == 0 and f"ABI {landlock_abi()}" in human.stdout
    # negative control: a kernel believed to lack Landlock (nothing replaces it) is
    # reported; at ABI 3 every built-in profile has a replacement for each right
    degraded = sandbox.confine("check", "--json", env_extra=["CONFINE_TEST_LANDLOCK_ABI_MAX=0"])
    assert degraded.returncode != 0
    dd = json.loads(degraded.stdout)
    assert not all(x["enforceable"] for x in dd["profiles"])


def test_check_a_profile_of_ones_own(sandbox, profile_dir):
    """`confine check -p FILE|NAME` judges exactly the named profiles (issue 23 item 7)."""
    mine = profile_dir("mine.yaml", GOOD)
    p = sandbox.confine("check", "--json", "-p", mine, "-p", "strict")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert [x["profile"] for x in d["profiles"]] == [mine, "strict"]
    assert all(x["enforceable"] for x in d["profiles"]), d["profiles"]
    human = sandbox.confine("check", "-p", mine)
    assert human.returncode == 0 and mine in human.stdout and "claude-code" not in human.stdout
    # the same file on a kernel believed to lack Landlock: exit 1, named
    degraded = sandbox.confine("check", "--json", "-p", mine,
                               env_extra=["CONFINE_TEST_LANDLOCK_ABI_MAX=0"])
    assert degraded.returncode == 1, degraded.stderr
    assert [x["enforceable"] for x in json.loads(degraded.stdout)["profiles"]] == [False]
    # a profile that cannot be loaded is the caller's error, with its key
    bad = profile_dir("bad.yaml", "extends: default\nfilesystem:\n  reed: [/usr]\n")
    _refused(sandbox.confine("check", "-p", bad), "reed")
    _refused(sandbox.confine("check", "-p", "no-such-profile"), "no-such-profile")


def test_profile_commands(sandbox, profile_dir):
    p = sandbox.confine("profile", "list")
    assert p.returncode == 0
    for name in ("default", "strict", "claude-code", "codex"):
        assert name in p.stdout
    rows = json.loads(sandbox.confine("profile", "list", "--json").stdout)
    assert {r["name"] for r in rows} >= {"default", "strict", "claude-code", "codex"}
    show = sandbox.confine("profile", "show", "claude-code")
    assert show.returncode == 0 and "extends: default" in show.stdout and "filesystem:" in show.stdout
    _refused(sandbox.confine("profile", "show", "no-such-profile"), "no-such-profile")
    good = profile_dir("good.yaml", GOOD)
    v = sandbox.confine("profile", "validate", good)
    assert v.returncode == 0 and "valid" in v.stdout, v
    _refused(sandbox.confine("profile", "validate", profile_dir("k.yaml", UNKNOWN_KEY)),
             "k.yaml:3", "did you mean 'filesystem'")
    _refused(sandbox.confine("profile", "validate", profile_dir("b.yaml", BAD_YAML)), "b.yaml:5")
    p = sandbox.confine("profile", "validate", "/tmp/confine-no-such.yaml")
    assert p.returncode == 125, p


# =====================================================================================
# Environment
# =====================================================================================

SECRET_ENV = {
    "AWS_SECRET_ACCESS_KEY": "aws-secret", "AWS_ACCESS_KEY_ID": "AKIAFAKE", "AWS_PROFILE": "prod",
    "GITHUB_TOKEN": "ghp_fake", "OPENAI_API_KEY": "sk-fake", "MY_SERVICE_PASSWORD": "pw",
    "SSH_AUTH_SOCK": "/tmp/ssh-fake/agent.1", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1/bus",
    "XDG_RUNTIME_DIR": "/run/user/1001", "KUBECONFIG": "/root/.kube/config",
    "LD_PRELOAD": "libc.so.6", "LD_LIBRARY_PATH": "/tmp/evil", "PYTHONSTARTUP": "/tmp/evil.py",
    "PYTHONPATH": "/tmp/evil", "BASH_ENV": "/tmp/evil.sh", "NODE_OPTIONS": "--require=/tmp/evil.js",
    "GIT_SSH_COMMAND": "evil", "PROMPT_COMMAND": "evil", "UNLISTED_VARIABLE": "x",
}
PLAIN_ENV = {"TERM": "xterm-256color", "TZ": "UTC", "LC_ALL": "C.UTF-8", "EDITOR": "vi",
             "COLORTERM": "truecolor"}
DUMP_ENV = [PY, "-c", "import os,json; print(json.dumps(dict(os.environ)))"]


def _env_extra(d):
    return [f"{k}={v}" for k, v in d.items()]


def test_environment_scrubbed(sandbox):
    extra = _env_extra({**SECRET_ENV, **PLAIN_ENV})
    outside = json.loads(sandbox.outside(DUMP_ENV, env_extra=extra).stdout)
    for k, v in SECRET_ENV.items():
        assert outside.get(k) == v, f"control: {k} reaches an unconfined child"
    p = sandbox.run(DUMP_ENV, env_extra=extra)
    assert p.returncode == 0, p.stderr
    inside = json.loads(p.stdout)
    leaked = sorted(k for k in SECRET_ENV if k in inside)
    assert not leaked, f"leaked into the sandbox: {leaked}"
    for k, v in PLAIN_ENV.items():
        assert inside.get(k) == v, f"{k} should pass (allowlist): {inside.get(k)}"
    assert inside["HOME"].startswith(sandbox.agent.pw_dir + "/.local/state/confine/homes/")
    assert inside["USER"] == inside["LOGNAME"] == sandbox.agent.pw_name
    assert inside["TMPDIR"].startswith("/tmp/confine-")


def test_environment_explicit_env(sandbox):
    extra = _env_extra(SECRET_ENV)
    p = sandbox.run(DUMP_ENV, "--env", "GITHUB_TOKEN", "--env", "X=1", "--env",
                    "AWS_SECRET_ACCESS_KEY", "--env", "EMPTY=", env_extra=extra)
    assert p.returncode == 0, p.stderr
    inside = json.loads(p.stdout)
    assert inside["GITHUB_TOKEN"] == "ghp_fake"
    assert inside["AWS_SECRET_ACCESS_KEY"] == "aws-secret"
    assert inside["X"] == "1" and inside["EMPTY"] == ""
    assert "OPENAI_API_KEY" not in inside and "SSH_AUTH_SOCK" not in inside


def test_private_tmpdir_removed(sandbox):
    p = sandbox.run(["sh", "-c", "echo $TMPDIR; mkdir $TMPDIR/d && echo x > $TMPDIR/d/f && "
                    "chmod 000 $TMPDIR/d && echo ok"])
    tmp = p.stdout.splitlines()[0]
    left = os.path.exists(tmp)
    if left:  # clean up after a failure (as root)
        os.chmod(os.path.join(tmp, "d"), 0o700)
        shutil.rmtree(tmp, ignore_errors=True)
    assert p.returncode == 0 and p.stdout.splitlines()[1] == "ok", p
    assert tmp.startswith("/tmp/confine-") and not left, f"{tmp} left behind"
    q = sandbox.run(["sh", "-c", "echo $TMPDIR"])
    assert q.stdout.strip() != tmp, "each run gets its own TMPDIR"


# =====================================================================================
# Signals, the supervisor's death, leftover processes
# =====================================================================================

SIG_AGENT = r'''
import os, signal, sys, time
names = sys.argv[1].split(",")
got = []
def h(sig, frame):   # os.write: no buffered-stdout lock to re-enter
    got.append(signal.Signals(sig).name)
    os.write(1, ("got " + signal.Signals(sig).name + "\n").encode())
for n in names:
    signal.signal(getattr(signal, n), h)
os.write(1, b"ready\n")
end = time.time() + 30
while len(got) < len(names) and time.time() < end:
    time.sleep(0.02)
sys.exit(7 if got == names else 1)
'''


def _readline(p, timeout=10.0) -> str:
    r, _, _ = select.select([p.stdout], [], [], timeout)
    return p.stdout.readline().strip() if r else "<timeout>"


def test_signals_forwarded(sandbox):
    """INT, TERM, HUP, QUIT, USR1, USR2, WINCH sent to the confine process reach
    the agent, which traps and records each; its exit status comes back."""
    names = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH"]
    p = sandbox.popen([PY, "-c", SIG_AGENT, ",".join(names)], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True)
    try:
        assert _readline(p) == "ready"
        for n in names:
            os.kill(p.pid, getattr(signal, n))
            line = _readline(p)
            if line != f"got {n}":
                p.kill()
                _, err = p.communicate(timeout=10)
                pytest.fail(f"{n} was not forwarded: {line!r}, confine exit {p.returncode}, "
                            f"stderr: {err!r}")
        assert p.wait(timeout=10) == 7
    finally:
        p.kill()
        p.wait()


def test_term_to_confine_ends_untrapping_agent(sandbox):
    p = sandbox.popen(["sh", "-c", "echo ready; exec sleep 60"], stdout=subprocess.PIPE, text=True)
    try:
        assert _readline(p) == "ready"
        time.sleep(0.1)
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(timeout=10) == 128 + signal.SIGTERM
    finally:
        p.kill()
        p.wait()


def _start_with_pidfile(sandbox, script: str, files: list[str]):
    """Start `sh -c script` confined; wait until it wrote each pid file. The pids
    it writes are those of its own pid namespace ($$ is 3 there), so return the
    host pid of each, found while the supervisor is alive (see host_pid)."""
    p = sandbox.popen(["sh", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    end = time.monotonic() + 10
    pids = {}
    while time.monotonic() < end and len(pids) < len(files):
        for f in files:
            path = os.path.join(sandbox.workdir, f)
            try:
                with open(path) as fh:
                    text = fh.read().strip()
                if text:
                    pids[f] = int(text)
            except (OSError, ValueError):
                pass
        time.sleep(0.05)
    assert len(pids) == len(files), f"agent did not start: {p.poll()} {files}"
    try:
        real = {f: host_pid(n, p.pid) for f, n in pids.items()}
    except BaseException:
        p.kill()
        p.wait()
        raise
    return p, real, pids


def _agent_tmpdir(pid: int) -> str | None:
    """The agent's private TMPDIR (a killed supervisor cannot remove it; we do)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"TMPDIR="):
                    return item[7:].decode()
    except OSError:
        pass
    return None


def _both_ways(sandbox):
    """Every layer (default), then without the pid and mount namespaces."""
    return ((sandbox, True), (sandbox.without_namespaces(), False))


def test_supervisor_sigkill_kills_agent(sandbox):
    """SIGKILL to the supervisor ends the agent: the namespace's init dies with
    it (every layer), or the agent's own death signal (without namespaces)."""
    for box, with_ns in _both_ways(sandbox):
        p, pids, ns_pids = _start_with_pidfile(box, "echo $$ > agent.pid; exec sleep 120",
                                               ["agent.pid"])
        agent = pids["agent.pid"]
        tmp = _agent_tmpdir(agent)
        try:
            # every layer: the agent is pid 4 of its namespace (1 init, 2 broker, 3 the
            # thread that hands the seccomp listener over)
            assert (ns_pids["agent.pid"] == 4) == with_ns, (box.layers, ns_pids)
            time.sleep(0.2)
            assert _alive(agent), "control: the agent runs while the supervisor lives"
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
            assert wait_dead(agent, 5), f"the agent survived its supervisor ({box.layers})"
        finally:
            kill_quietly(agent)
            p.kill()
            p.wait()
            if tmp and tmp.startswith("/tmp/confine-"):
                shutil.rmtree(tmp, ignore_errors=True)
        os.unlink(os.path.join(sandbox.workdir, "agent.pid"))


def test_supervisor_sigkill_kills_agent_descendants(sandbox):
    """The agent's own children (a build, a shell tool) must not outlive the
    supervisor either: they are in the agent's pid namespace, which ends with
    its init when the supervisor is killed.
    Documented limitation, not a failure: without namespaces (Landlock and
    seccomp alone) a child of the agent has no death signal tied to the
    supervisor and survives a SIGKILL to it; confine refuses that mode unless
    --degrade mount_namespace, which names this gap."""
    script = "sleep 120 >/dev/null 2>&1 & echo $! > bg.pid; echo $$ > agent.pid; wait"
    for box, with_ns in _both_ways(sandbox):
        p, pids, _ = _start_with_pidfile(box, script, ["agent.pid", "bg.pid"])
        tmp = _agent_tmpdir(pids["agent.pid"])
        try:
            time.sleep(0.2)
            assert _alive(pids["bg.pid"]), "control: the background child runs"
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
            assert wait_dead(pids["agent.pid"], 5), f"the agent survived its supervisor ({box.layers})"
            if with_ns:
                assert wait_dead(pids["bg.pid"], 5), \
                    f"the agent's child {pids['bg.pid']} survived the supervisor's death (SIGKILL)"
            else:
                assert not wait_dead(pids["bg.pid"], 0.5), \
                    "without namespaces the child now dies too (update the documented gap)"
        finally:
            for pid in pids.values():
                kill_quietly(pid)
            p.kill()
            p.wait()
            if tmp and tmp.startswith("/tmp/confine-"):
                shutil.rmtree(tmp, ignore_errors=True)
        for f in ("agent.pid", "bg.pid"):
            os.unlink(os.path.join(sandbox.workdir, f))


@pytest.mark.parametrize("how", ["background", "double-fork+setsid"])
def test_leftover_processes_killed(sandbox, how):
    """When the agent exits, whatever it left running is killed: the pid
    namespace ends with its init (every layer), or the supervisor, a child
    subreaper, kills its orphans (without namespaces). Control: the same
    script outside leaves the process running. The agent waits for a `go`
    file before exiting, so the test can find the host pid of what it left."""
    script = {"background": "sleep 120 >/dev/null 2>&1 & echo $! > bg.pid",
              "double-fork+setsid": "(setsid sleep 120 >/dev/null 2>&1 & echo $! > bg.pid) &"}[how]
    script += "\nwhile [ ! -s bg.pid ] || [ ! -e go ]; do sleep 0.05; done; exit 3"
    bg, go = os.path.join(sandbox.workdir, "bg.pid"), os.path.join(sandbox.workdir, "go")
    open(go, "w").close()
    ctl = sandbox.outside(["sh", "-c", script], timeout=30)
    assert ctl.returncode == 3, ctl
    ctl_pid = int(open(bg).read())
    try:
        assert _alive(ctl_pid), "control: outside, the process outlives the script"
    finally:
        kill_quietly(ctl_pid)
    for box, _ in _both_ways(sandbox):
        os.unlink(bg)
        os.unlink(go)
        p, pids, _ = _start_with_pidfile(box, script, ["bg.pid"])
        pid = pids["bg.pid"]
        try:
            assert _alive(pid), "control: the left-over process runs before the agent exits"
            open(go, "w").close()
            assert p.wait(timeout=30) == 3
            assert wait_dead(pid, 2), \
                f"leftover process {pid} still running after confine exited ({box.layers})"
        finally:
            kill_quietly(pid)
            p.kill()
            p.wait()


def test_agent_exit_status_with_leftovers(sandbox):
    p = sandbox.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & exit 9"], timeout=30)
    assert p.returncode == 9


# =====================================================================================
# Degraded kernels (CONFINE_TEST_LANDLOCK_ABI_MAX only lowers what confine believes)
# =====================================================================================

ABI3 = ["CONFINE_TEST_LANDLOCK_ABI_MAX=3"]


def test_degraded_refused_then_allowed(sandbox):
    d = json.loads(sandbox.run(["true"], "--dry-run", "--json", env_extra=ABI3).stdout)
    # at ABI 3 every right the default profile needs is replaced here: the pid namespace
    # replaces signal scoping, the network namespace abstract socket scoping (the profile
    # grants no TCP port), the nodev host view device ioctls
    assert [m["feature"] for m in d["missing"]] == [], d["missing"]
    assert d["mechanisms"]["landlock.scope_signal"].startswith("pid namespace")
    assert d["mechanisms"]["landlock.scope_abstract_unix"].startswith("network namespace")
    assert d["mechanisms"]["landlock.ioctl_dev"].startswith("nodev host view")
    p = sandbox.run(RAN, env_extra=ABI3)
    assert p.returncode == 0 and p.stdout == "RAN\n" and "degraded" not in p.stderr, p
    # no Landlock at all has no replacement: refused, naming it
    no_ll = ["CONFINE_TEST_LANDLOCK_ABI_MAX=0"]
    d = json.loads(sandbox.run(["true"], "--dry-run", "--json", env_extra=no_ll).stdout)
    missing = [m["feature"] for m in d["missing"]]
    assert "landlock" in missing, missing
    # control: on the real kernel nothing is missing and it runs quietly
    ok = sandbox.run(RAN)
    assert ok.returncode == 0 and ok.stdout == "RAN\n" and "degraded" not in ok.stderr
    p = sandbox.run(RAN, env_extra=no_ll)
    _refused(p, missing[0], "--allow-degraded")
    # allowed explicitly: runs, and names every missing protection on stderr
    p = sandbox.run(RAN, "--allow-degraded", env_extra=no_ll)
    assert p.returncode == 0 and p.stdout == "RAN\n", p
    for m in missing:
        assert m in p.stderr, f"{m} not named on stderr:\n{p.stderr}"


def test_degraded_names_tcp_right_when_ports_granted(sandbox):
    """A profile granting a TCP port of the host's loopback: below ABI 4 confine
    cannot filter ports (claude-code, whose hosts go through the gateway in a
    network namespace of its own, runs: the supervisor routes every connect)."""
    prof = os.path.join(sandbox.workdir, "ports.yaml")
    with open(prof, "w") as f:
        f.write("extends: default\nnetwork:\n  connect_tcp: [8080]\n")
    os.chmod(prof, 0o644)
    ok = sandbox.run(["true"], "-p", "claude-code", env_extra=ABI3)
    assert ok.returncode == 0, ok.stderr
    p = sandbox.run(RAN, "-p", prof, env_extra=ABI3)
    assert p.returncode == 125 and "RAN" not in p.stdout, p
    assert "landlock.net_tcp" in p.stderr or "TCP" in p.stderr, p.stderr
    _one_line(p)


def test_degraded_still_enforces_what_it_can(sandbox):
    """Below the Landlock ABI the default profile needs, --allow-degraded still
    runs every layer this kernel has: the read-only host view refuses a write
    outside first (EROFS); without namespaces, Landlock ABI 3 refuses it
    (EACCES). Nothing reaches the host either way."""
    body = ("import os\n"
            "try:\n    open('/tmp/x-confine-degraded', 'w'); print('WROTE')\n"
            "except OSError as e:\n    print('DENIED', e.errno)\n")
    for box, want in ((sandbox, "DENIED 30\n"), (sandbox.without_namespaces(), "DENIED 13\n")):
        p = box.run([PY, "-c", body], "--allow-degraded", env_extra=ABI3)
        assert p.returncode == 0 and p.stdout == want, (box.layers, p)
        # replaced either way: by the pid namespace, or by mediated signals
        assert "landlock.scope_signal" not in p.stderr, p.stderr
        # the mount namespace's parts have replacements (broker, Landlock) at ABI 3
        assert "degraded: NOT enforced: mount_namespace" not in p.stderr, p.stderr
        assert not os.path.exists("/tmp/x-confine-degraded")


def test_approver_that_cannot_be_used_is_refused_before_the_run(sandbox, tmp_path):
    """--approver with a profile that never asks, or naming a program that does not
    exist: one line, exit 125, the command never runs (its marker file stays absent).
    Control: an existing program under network.default: ask is accepted (--dry-run)."""
    marker = os.path.join(sandbox.workdir, "ran")
    p = sandbox.run(["touch", marker], "--approver", "/bin/true")
    assert p.returncode == 125 and "network.default: ask" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not os.path.exists(marker)
    d = tempfile.mkdtemp(prefix="confine-ask-")
    os.chmod(d, 0o755)
    prof = os.path.join(d, "ask.yaml")
    with open(prof, "w") as f:
        f.write("extends: default\nnetwork:\n  default: ask\n")
    os.chmod(prof, 0o644)
    p = sandbox.run(["touch", marker], "-p", prof, "--approver", "no-such-approver-x --json")
    assert p.returncode == 125 and "command not found" in p.stderr, p.stderr
    assert not os.path.exists(marker)
    ok = sandbox.run(["true"], "-p", prof, "--approver", "/bin/true", "--dry-run")
    assert ok.returncode == 0, ok.stderr
    # a profile the launcher cannot read: one line, not an internal error
    os.chmod(d, 0o700)
    if sandbox.mode == "user":
        p = sandbox.run(["true"], "-p", prof)
        assert p.returncode == 125 and "cannot read profile" in p.stderr, p.stderr
        assert "internal error" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    shutil.rmtree(d, ignore_errors=True)

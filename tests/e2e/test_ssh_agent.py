"""The ssh-agent without the keys (issue 24 item 5): real confined processes, started
as root (the agent runs as the test account) and as the test account itself.

Outside: a real ssh-agent (`ssh-agent -D -a SOCK`, run by the launching account:
it serves only its own uid and root) holding two real keys, LISTED and OTHER; a
real sshd on the host's loopback (a high port, run as the test account, which
is also the only account it can log in) whose authorized_keys takes both keys,
with a bare git repository behind it. The profile lets the agent reach that one
port (through confine's gateway) and names only LISTED in `ssh_agent.keys`.
Every refusal has a control beside it: the same key, the same message, against
the real agent outside. Nothing leaves the machine.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator

import pytest
from conftest import PY, write_owned

pytestmark = pytest.mark.skipif(
    not (shutil.which("sshd") or os.path.exists("/usr/sbin/sshd")) or not shutil.which("ssh-agent"),
    reason="openssh-server or openssh-client is not installed (scripts/test-deps.sh installs "
           "them): the ssh-agent tests need a real sshd and ssh-agent")
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _as(pw) -> dict:
    def drop() -> None:
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    return {"preexec_fn": drop} if os.geteuid() != pw.pw_uid else {}


def _wait_for(path: str) -> None:
    for _ in range(100):
        if os.path.exists(path):
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _fingerprint(pub: str) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", pub], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


class Forge:
    """sshd + bare repo + known_hosts, shared by the module's tests (as the test account)."""

    def __init__(self, pw) -> None:
        self.pw = pw
        self.dir = tempfile.mkdtemp(prefix="confine-sshforge-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        d = self.dir
        run = {"check": True, "capture_output": True, **_as(pw)}
        for name in ("hostkey", "listed", "other"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name,
                            "-f", os.path.join(d, name)], **run)
        self.listed, self.other = os.path.join(d, "listed"), os.path.join(d, "other")
        self.fp_listed = _fingerprint(self.listed + ".pub")
        self.fp_other = _fingerprint(self.other + ".pub")
        keys = "".join(open(k + ".pub").read() for k in (self.listed, self.other))
        write_owned(os.path.join(d, "authorized_keys"), keys, pw, 0o600)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        write_owned(os.path.join(d, "sshd_config"), textwrap.dedent(f"""\
            Port {self.port}
            ListenAddress 127.0.0.1
            HostKey {d}/hostkey
            AuthorizedKeysFile {d}/authorized_keys
            PidFile none
            UsePAM no
            StrictModes no
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            PubkeyAuthentication yes
            AllowUsers {pw.pw_name}
            """), pw)
        self.repo = os.path.join(d, "repo.git")
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", self.repo], **run)
        hostpub = open(os.path.join(d, "hostkey.pub")).read().split()
        # the person's known_hosts, read by the supervisor outside
        self.known_hosts = write_owned(os.path.join(d, "known_hosts"),
                                       f"[127.0.0.1]:{self.port} {hostpub[0]} {hostpub[1]}\n", pw)
        os.makedirs("/run/sshd", exist_ok=True)
        self.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", os.path.join(d, "sshd_config")],
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "sshd.log"), "w"),
                                     **_as(pw))
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("sshd did not start: " + open(os.path.join(d, "sshd.log")).read())

    def close(self) -> None:
        self.sshd.kill()
        self.sshd.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self) -> str:
        return f"ssh://{self.pw.pw_name}@127.0.0.1:{self.port}{self.repo}"


@pytest.fixture(scope="module")
def forge(test_user) -> Iterator[Forge]:
    if os.geteuid() != 0:
        pytest.skip("needs root (to run the test account's sshd and processes)")
    f = Forge(test_user)
    yield f
    f.close()


class RealAgent:
    """The launching person's ssh-agent, holding both keys."""

    def __init__(self, forge: Forge, launcher) -> None:
        self.dir = tempfile.mkdtemp(prefix="confine-realagent-", dir="/tmp")
        os.chown(self.dir, launcher.pw_uid, launcher.pw_gid)
        self.sock = os.path.join(self.dir, "agent.sock")
        self.launcher = launcher
        self.proc = subprocess.Popen(["ssh-agent", "-D", "-a", self.sock], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, **_as(launcher))
        _wait_for(self.sock)
        for k in (forge.listed, forge.other):
            # the agent reads the key as the launcher: a root-owned copy for root
            subprocess.run(["ssh-add", "-q", k], env={"SSH_AUTH_SOCK": self.sock, "PATH": "/usr/bin:/bin"},
                           check=True, capture_output=True)

    def listed(self) -> str:
        return subprocess.run(["ssh-add", "-l"], env={"SSH_AUTH_SOCK": self.sock, "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, **_as(self.launcher)).stdout

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def agent(sandbox, forge) -> Iterator[RealAgent]:
    launcher = sandbox.pw if sandbox.mode == "user" else __import__("pwd").getpwuid(0)
    a = RealAgent(forge, launcher)
    yield a
    a.close()


def _profile(sandbox, forge: Forge, **over: object) -> str:
    sa = {"keys": [forge.fp_listed], "hosts": [f"127.0.0.1:{forge.port}"], "namespaces": ["git"],
          "known_hosts": [forge.known_hosts], "decision": "allow"}
    sa.update(over)
    d = tempfile.mkdtemp(prefix="profile-", dir=forge.dir)     # removed with the forge
    os.chmod(d, 0o755)
    os.chown(d, sandbox.pw.pw_uid, sandbox.pw.pw_gid)
    text = ("extends: default\n"
            f"network:\n  allow: ['127.0.0.1:{forge.port}']\n"
            f"ssh_agent: {json.dumps(sa)}\n")
    return write_owned(os.path.join(d, "p.yaml"), text, sandbox.pw)


def _git_env(sandbox, forge: Forge) -> list[str]:
    # the client inside trusts the host by its own file: what it believes decides nothing
    kh = write_owned(os.path.join(sandbox.workdir, ".kh"), open(forge.known_hosts).read(), sandbox.agent)
    return [f"GIT_SSH_COMMAND=ssh -F /dev/null -o BatchMode=yes -o UserKnownHostsFile={kh} "
            "-o StrictHostKeyChecking=yes -o IdentityFile=none",
            "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.invalid",
            "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.invalid"]


def _exec(sandbox, agent: RealAgent, profile: str, script: str, *opts: str, env=()):
    envs = [a for e in env for a in ("--env", e)]
    p = sandbox.run(["sh", "-c", script], "--profile", profile, "--log", os.path.join(
        os.path.dirname(profile), "log.jsonl"), *envs, *opts,
        env_extra=[f"SSH_AUTH_SOCK={agent.sock}"], timeout=60)
    log = []
    lp = os.path.join(os.path.dirname(profile), "log.jsonl")
    if os.path.exists(lp):
        log = [json.loads(line) for line in open(lp) if line.strip()]
    return p, [e for e in log if e.get("event") in ("ssh-agent", "refusal")
               and (e.get("event") == "ssh-agent" or e.get("layer") == "ssh-agent")]


PUSH = ("git init -q -b main r && cd r && echo x > f && git add f && git commit -qm one && "
        "echo LIST; ssh-add -l; echo PUSH; git push -q {url} main:{branch} && echo PUSHED")


def test_push_with_listed_key_only(sandbox, forge, agent):
    """Inside: only LISTED is listed and `git push` over ssh works with it; the login
    signature is judged by the host key bound (session-bind) and the known_hosts read
    outside. Control: the real agent outside lists both keys."""
    outside = agent.listed()
    assert forge.fp_listed in outside and forge.fp_other in outside, outside
    prof = _profile(sandbox, forge)
    p, log = _exec(sandbox, agent, prof, PUSH.format(url=forge.url(), branch=os.path.basename(sandbox.workdir)), env=_git_env(sandbox, forge))
    assert "PUSHED" in p.stdout, (p.stdout, p.stderr, log)
    listed = p.stdout.split("LIST")[1].split("PUSH")[0]
    assert forge.fp_listed in listed and forge.fp_other not in listed, listed
    signs = [e for e in log if e.get("kind") == "sign"]
    assert signs and all(e["decision"] == "allow" and e["key"] == forge.fp_listed
                         and e["host"] == f"127.0.0.1:{forge.port}" for e in signs), log
    assert subprocess.run(["git", "--git-dir", forge.repo, "rev-parse",
                           os.path.basename(sandbox.workdir)],
                          capture_output=True).returncode == 0

    # the same push when the profile's host is another: the bound host key is
    # not known for any listed host, so nothing is signed
    prof2 = _profile(sandbox, forge, hosts=[f"127.0.0.2:{forge.port}"])
    p, log = _exec(sandbox, agent, prof2, PUSH.format(url=forge.url(), branch=os.path.basename(sandbox.workdir)), env=_git_env(sandbox, forge))
    assert "PUSHED" not in p.stdout, p.stdout
    assert any(e.get("decision") == "deny" and "not known for any host" in e.get("reason", "")
               for e in log), log
    assert "ssh-agent: ssh login to" in p.stderr, p.stderr


# Speaks the agent protocol by hand: a sign request for a key blob, and the
# messages that change the agent; prints each answer's type.
RAW = r"""
import base64, json, os, socket, struct, sys
def s(b): return struct.pack(">I", len(b)) + b
def call(body):
    c = socket.socket(socket.AF_UNIX); c.connect(os.environ["SSH_AUTH_SOCK"])
    c.sendall(struct.pack(">I", len(body)) + body)
    n = struct.unpack(">I", c.recv(4))[0]; r = b""
    while len(r) < n: r += c.recv(n - len(r))
    c.close(); return r[0]
blob = lambda path: base64.b64decode(open(path).read().split()[1])
userauth = s(b"x" * 32) + bytes([50]) + s(b"git") + s(b"ssh-connection") + s(b"publickey") + b"\1" + s(b"ssh-ed25519")
out = {}
for name in ("listed", "other"):
    k = blob(sys.argv[1] + "/" + name + ".pub")
    out["sign_" + name] = call(bytes([13]) + s(k) + s(userauth + s(k)) + struct.pack(">I", 0))
    out["sshsig_file_" + name] = call(bytes([13]) + s(k) + s(b"SSHSIG" + s(b"file") + s(b"") + s(b"sha512") + s(b"h" * 64)) + struct.pack(">I", 0))
out["remove_all"] = call(bytes([19]))
out["lock"] = call(bytes([22]) + s(b"pw"))
out["add"] = call(bytes([17]) + s(b"ssh-ed25519") + s(b"k") + s(b"k") + s(b"c"))
out["unknown"] = call(bytes([99]))
try:    # the person's own agent, by its path
    socket.socket(socket.AF_UNIX).connect(sys.argv[2])
    out["real"] = "reached"
except OSError as e:
    out["real"] = e.strerror
out["sock"] = os.environ["SSH_AUTH_SOCK"]
print(json.dumps(out))
"""


def test_unlisted_key_and_changes_refused(sandbox, forge, agent):
    """Inside: a sign request for OTHER, a login signature for LISTED with no host bound,
    a file signature outside the allowed namespaces, REMOVE_ALL, LOCK, ADD and an
    unknown message: each answered FAILURE (5) and logged; the person's own agent
    cannot be connected to by its path. Control: outside, the real agent signs the
    same requests (14), is reached by its path, and still holds both keys afterwards."""
    prof = _profile(sandbox, forge)
    code = write_owned(os.path.join(sandbox.workdir, "raw.py"), RAW, sandbox.agent)
    for k in ("listed", "other"):
        shutil.copy(os.path.join(forge.dir, k + ".pub"), os.path.join(sandbox.workdir, k + ".pub"))
        os.chmod(os.path.join(sandbox.workdir, k + ".pub"), 0o644)
    # control on a throwaway agent (the real one must keep its keys): signs, changes
    # accepted; the REMOVE_ALL there is why this one is a copy
    spare = RealAgent(forge, agent.launcher)
    try:
        ctl = subprocess.run([PY, code, sandbox.workdir, agent.sock], capture_output=True, text=True,
                             env={"SSH_AUTH_SOCK": spare.sock}, **_as(agent.launcher))
    finally:
        spare.close()
    c = json.loads(ctl.stdout)
    assert c["sign_other"] == 14 and c["sign_listed"] == 14 and c["remove_all"] == 6, c
    assert c["real"] == "reached", c
    p, log = _exec(sandbox, agent, prof, f"{PY} {code} {sandbox.workdir} {agent.sock}")
    assert p.returncode == 0, (p.stdout, p.stderr)
    got = json.loads(p.stdout.strip().splitlines()[-1])
    # inside, SSH_AUTH_SOCK is the proxy and the person's agent is out of reach
    assert got.pop("real") != "reached" and got.pop("sock") != agent.sock, got
    assert set(got.values()) == {5}, got
    reasons = " | ".join(str(e.get("reason", "")) + str(e.get("op", "")) for e in log)
    for want in ("not in ssh_agent.keys", "bound no host", "namespace 'file'",
                 "remove-all-identities", "lock", "add-identity", "message 99"):
        assert want in reasons, (want, reasons)
    # the real agent was never told to drop or lock: it still lists both
    after = agent.listed()
    assert forge.fp_listed in after and forge.fp_other in after, after


def test_commit_signing_with_listed_key(sandbox, forge, agent):
    """git commit -S with gpg.format=ssh and the public key as user.signingkey:
    signed by the real agent through the proxy (namespace git), and the signature
    verifies outside; the same with OTHER is refused (the control: OTHER signs
    outside)."""
    prof = _profile(sandbox, forge)
    d = os.path.join(sandbox.workdir, "pub")
    os.mkdir(d)
    for k in ("listed", "other"):
        shutil.copy(os.path.join(forge.dir, k + ".pub"), os.path.join(d, k + ".pub"))
        os.chmod(os.path.join(d, k + ".pub"), 0o644)
    # -c: a repository's own config may not set gpg.* (confine's git config guard)
    script = ("git init -q -b main r && cd r && echo x > f && git add f && "
              "git -c gpg.format=ssh -c user.signingkey={d}/{k}.pub commit -q -S -m signed && "
              "echo SIGNED && git cat-file commit HEAD")
    p, log = _exec(sandbox, agent, prof, script.format(d=d, k="listed"),
                   env=_git_env(sandbox, forge))
    assert "SIGNED" in p.stdout and "BEGIN SSH SIGNATURE" in p.stdout, (p.stdout, p.stderr, log)
    assert any(e.get("kind") == "sign" and e.get("use") == "file" and e.get("namespace") == "git"
               and e.get("decision") == "allow" for e in log), log
    # verified outside against LISTED's public key
    allowed = os.path.join(os.path.dirname(prof), "allowed")
    with open(allowed, "w") as f:
        f.write("a@example.invalid " + " ".join(open(forge.listed + ".pub").read().split()[:2]) + "\n")
    repo = os.path.join(sandbox.workdir, "r")
    v = subprocess.run(["git", "-c", f"safe.directory={repo}", "-c", f"gpg.ssh.allowedSignersFile={allowed}",
                        "-C", repo, "verify-commit", "HEAD"], capture_output=True, text=True)
    assert v.returncode == 0, v.stderr

    shutil.rmtree(repo)
    p, log = _exec(sandbox, agent, prof, script.format(d=d, k="other"), env=_git_env(sandbox, forge))
    # ssh-keygen finds OTHER neither listed by the agent nor as a private key file
    assert "SIGNED" not in p.stdout, p.stdout
    # control: OTHER signs outside with the real agent
    ctl = subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "git", "-f", os.path.join(d, "other.pub")],
                         input="data", capture_output=True, text=True,
                         env={"SSH_AUTH_SOCK": agent.sock, "PATH": "/usr/bin:/bin"}, **_as(agent.launcher))
    assert "BEGIN SSH SIGNATURE" in ctl.stdout, ctl.stderr


# Answers "once" to the first question and "deny" to every later one; records each.
APPROVER = """#!/usr/bin/python3
import json, sys
q = json.loads(sys.stdin.readline())
with open({asked!r}, "a") as f:
    f.write(json.dumps(q) + "\\n")
n = sum(1 for _ in open({asked!r}))
print(json.dumps({{"decision": "once" if n == 1 else "deny"}}))
"""


def test_ask_through_an_approver(sandbox, forge, agent):
    """decision: ask: each signature is put to --approver (host, key, the process and
    its command line), once per use: the first push is approved once and goes
    through, the second is asked again, denied, and refused."""
    prof = _profile(sandbox, forge, decision="ask")
    d = os.path.dirname(prof)
    asked = os.path.join(d, "asked.jsonl")
    script = write_owned(os.path.join(d, "approve"), APPROVER.format(asked=asked), sandbox.pw, 0o755)
    write_owned(asked, "", sandbox.pw, 0o644)
    branch = os.path.basename(sandbox.workdir)
    push = (PUSH.format(url=forge.url(), branch=branch)
            + f" && git push -q {forge.url()} main:{branch}-again && echo AGAIN")
    p, log = _exec(sandbox, agent, prof, push, "--approver", script, env=_git_env(sandbox, forge))
    qs = [json.loads(line) for line in open(asked) if line.strip()]
    assert "PUSHED" in p.stdout and "AGAIN" not in p.stdout, (p.stdout, p.stderr, log)
    assert len(qs) == 2, qs
    for q in qs:
        assert q["host"] == "127.0.0.1" and q["port"] == forge.port, q
        assert forge.fp_listed in q["via"], q
        # the process: the holder of the client's socket (not the broker that connected it)
        assert "/ssh (" in (q["exe"] or "") and forge.repo in q["exe"], q
    assert any(e.get("decision") == "deny" and "not approved" in e.get("reason", "")
               for e in log), log


@pytest.mark.parametrize("sandbox", ["user"], indirect=True)
def test_ask_through_the_runs_approver_socket(sandbox, forge, agent):
    """decision: ask with --approver-socket: a signature is a question of the run's one
    approval engine, kind ssh_agent (key, host, port, the process's command line), to
    the same decider as every other kind; answered once, the push goes through, and
    the next one is asked again (denied: refused). One approval event each."""
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    from deciders import Decider
    prof = _profile(sandbox, forge, decision="ask")
    branch = os.path.basename(sandbox.workdir)
    push = (PUSH.format(url=forge.url(), branch=branch)
            + f" && git push -q {forge.url()} main:{branch}-again && echo AGAIN")
    d = Decider(["once"])
    try:
        p, _ = _exec(sandbox, agent, prof, push, "--approver-socket", d.path,
                     env=_git_env(sandbox, forge))
    finally:
        d.close()
    assert "PUSHED" in p.stdout and "AGAIN" not in p.stdout, (p.stdout, p.stderr)
    assert [q["kind"] for q in d.questions] == ["ssh_agent", "ssh_agent"], d.questions
    for q in d.questions:
        assert q["subject"]["key"] == forge.fp_listed and q["subject"]["use"] == "login", q
        assert (q["subject"]["host"], q["subject"]["port"]) == ("127.0.0.1", forge.port), q
        assert forge.repo in q["process"].get("cmdline", ""), q
    with open(os.path.join(os.path.dirname(prof), "log.jsonl")) as f:
        record = [json.loads(x) for x in f if x.strip()]
    asked = [(e["of"], e.get("answer")) for e in record if e.get("event") == "approval"]
    assert asked == [("ssh_agent", "once"), ("ssh_agent", "deny")], asked


def test_refused_when_the_real_agent_lies_where_the_agent_may_connect(sandbox, forge, agent):
    """The person's agent socket in the workdir: the agent could connect to it itself,
    so the run is refused (125, one line). Control: the same run with the socket outside."""
    prof = _profile(sandbox, forge)
    inside = os.path.join(sandbox.workdir, "agent.sock")
    p = sandbox.run(["true"], "--profile", prof, env_extra=[f"SSH_AUTH_SOCK={inside}"])
    assert p.returncode == 125 and "lies in" in p.stderr, (p.returncode, p.stderr)
    ctl = sandbox.run(["true"], "--profile", prof, env_extra=[f"SSH_AUTH_SOCK={agent.sock}"])
    assert ctl.returncode == 0, ctl.stderr

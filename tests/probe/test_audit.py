"""`confine audit` finds what was planted in a fake HOME and a fake socket
directory, says whether the profile blocks each finding, and exits 1 when a
finding is not blocked."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile

import pytest

from .conftest import BASE_PATH, Runner, make_workdir, needs_root, parse

MODES = ("root", "user")

CREDENTIALS = {".ssh/id_rsa": 0o644, ".aws/credentials": 0o600, ".netrc": 0o600,
               ".docker/config.json": 0o600, ".config/gcloud/credentials.db": 0o600}


class Planted:
    def __init__(self, pw):
        self.pw = pw
        self.root = tempfile.mkdtemp(prefix="confine-audit-test-")
        os.chmod(self.root, 0o755)
        self.home = os.path.join(self.root, "home")
        self.sockdir = os.path.join(self.root, "run")
        self.socks: list[socket.socket] = []
        for rel, mode in CREDENTIALS.items():
            p = os.path.join(self.home, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write("fake credential\n")
            os.chmod(p, mode)
        for dirpath, dirnames, filenames in os.walk(self.home):
            for n in [dirpath] + [os.path.join(dirpath, x) for x in filenames]:
                os.chown(n, pw.pw_uid, pw.pw_gid)
        uid = pw.pw_uid
        self.sockets = {
            "docker": "docker.sock",
            "containerd": "containerd/containerd.sock",
            "podman": "podman/podman.sock",
            "ssh-agent": "ssh-Xq1/agent.4242",
            "system bus": "dbus/system_bus_socket",
            "session bus": f"user/{uid}/bus",
            "systemd": f"user/{uid}/systemd/private",
            "tmux": f"tmux-{uid}/default",
        }
        for rel in self.sockets.values():
            p = os.path.join(self.sockdir, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(p)
            s.listen(1)
            os.chmod(p, 0o660)
            self.socks.append(s)
        # docker-like: root:<the account's group> 0660, as with the docker group
        os.chown(self.path("docker"), 0, pw.pw_gid)
        for dirpath, dirnames, filenames in os.walk(self.sockdir):
            os.chmod(dirpath, 0o755)
        self.meta = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.meta.bind(("127.0.0.1", 0))
        self.meta.listen(8)
        self.meta_port = self.meta.getsockname()[1]

    def path(self, key):
        return os.path.join(self.sockdir, self.sockets[key])

    def env(self):
        return ("GITHUB_TOKEN=ghp_fake", "AWS_SECRET_ACCESS_KEY=fake",
                "AWS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt", "AWS_REGION=eu-west-1",
                f"SSH_AUTH_SOCK={self.path('ssh-agent')}",
                f"CONFINE_AUDIT_METADATA=127.0.0.1:{self.meta_port}")

    def close(self):
        for s in self.socks + [self.meta]:
            s.close()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def planted(test_user):
    needs_root()
    p = Planted(test_user)
    yield p
    p.close()


@pytest.fixture
def wd(test_user):
    needs_root()
    d = make_workdir(test_user)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _audit(mode, pw, cmd, planted, wd, *args, options=True):
    # --connect: the metadata check goes to the planted listener on loopback
    extra = ["--home", planted.home, "--socket-dir", planted.sockdir,
             "--connect"] if options else []
    return Runner(mode, pw, cmd)("audit", "--json", "-w", wd, *extra, *args,
                                 env_extra=planted.env(), cwd=wd)


def _ids(r):
    return {f["id"]: f for f in r["findings"]}


@pytest.mark.parametrize("mode", MODES)
def test_audit_finds_planted_and_default_blocks_them(test_user, confine_cmd, planted, wd, mode):
    p = _audit(mode, test_user, confine_cmd, planted, wd)
    r = parse(p)
    f = _ids(r)
    assert r["home"] == os.path.realpath(planted.home)
    for key in planted.sockets:
        fid = "socket:" + planted.path(key)
        assert fid in f, (key, sorted(f))
        assert f[fid]["blocked"] is True, f[fid]
        assert f[fid]["category"] == "host daemons" and f[fid]["severity"] == "high"
    assert "docker" in f["socket:" + planted.path("docker")]["title"]
    docker = f["socket:" + planted.path("docker")]["detail"]
    assert "reachable by you: yes" in docker
    assert f"group {test_user.pw_name}" in docker
    for rel in (".ssh", ".aws", ".netrc", ".docker", ".config/gcloud"):
        fid = "credential:~/" + rel
        assert fid in f, (rel, sorted(f))
        assert f[fid]["blocked"] is True, f[fid]
    assert "readable by other local users" in f["credential:~/.ssh"]["detail"]
    for name in ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK"):
        assert f["env:" + name]["blocked"] is True
        assert "ghp_fake" not in str(f["env:" + name])
    # settings and paths are not credentials (issue 23 item 7), beside the real ones above
    assert "env:AWS_CA_BUNDLE" not in f and "env:AWS_REGION" not in f
    assert f["metadata"]["severity"] == "high" and f["metadata"]["blocked"] is True
    assert "landlock" in f and "userns" in f and "lsm" in f
    assert p.returncode == r["exit_status"] == (1 if any(x["blocked"] is False
                                                         for x in r["findings"]) else 0)


def test_audit_env_overrides(test_user, confine_cmd, planted, wd):
    env = planted.env() + (f"CONFINE_AUDIT_HOME={planted.home}",
                           f"CONFINE_AUDIT_SOCKET_DIRS=/nonexistent:{planted.sockdir}")
    p = Runner("root", test_user, confine_cmd)("audit", "--json", "-w", wd, env_extra=env)
    f = _ids(parse(p))
    assert "socket:" + planted.path("docker") in f
    assert "credential:~/.aws" in f


@pytest.mark.parametrize("mode", MODES)
def test_audit_permissive_profile_is_not_blocked(test_user, confine_cmd, planted, wd, mode):
    prof = os.path.join(planted.root, "loose.yaml")
    with open(prof, "w") as fh:
        fh.write(f"extends: default\n"
                 f"unix_sockets:\n  allow: [{planted.sockdir}]\n"
                 f"network:\n  connect_tcp: [{planted.meta_port}]\n"
                 f"env:\n  pass: [GITHUB_TOKEN]\n")
    os.chmod(prof, 0o644)
    p = _audit(mode, test_user, confine_cmd, planted, wd, "-p", prof)
    r = parse(p)
    f = _ids(r)
    assert f["socket:" + planted.path("docker")]["blocked"] is False
    assert f["socket:" + planted.path("docker")]["fix"]
    assert f["env:GITHUB_TOKEN"]["blocked"] is False
    assert f["env:AWS_SECRET_ACCESS_KEY"]["blocked"] is True
    assert f["metadata"]["blocked"] is False
    assert r["verdict"] == "fail" and p.returncode == 1


def test_audit_human_output(test_user, confine_cmd, planted, wd):
    extra = ["--home", planted.home, "--socket-dir", planted.sockdir]
    p = Runner("root", test_user, confine_cmd)("audit", "-w", wd, *extra,
                                               env_extra=planted.env())
    first = p.stdout.splitlines()[0]
    assert first.startswith(("confine audit: PASS", "confine audit: FAIL")), p.stdout[:300]
    for word in ("host daemons", "credentials", "environment", "docker socket", "blocked"):
        assert word in p.stdout


def test_audit_unreachable_metadata_is_not_an_error(test_user, confine_cmd, planted, wd):
    env = [e for e in planted.env() if not e.startswith("CONFINE_AUDIT_METADATA")]
    env.append("CONFINE_AUDIT_METADATA=127.0.0.1:1")  # nothing listens on port 1
    p = Runner("root", test_user, confine_cmd)("audit", "--json", "-w", wd, "--home",
                                               planted.home, "--connect", env_extra=env)
    f = _ids(parse(p))
    assert f["metadata"]["severity"] == "info" and f["metadata"]["blocked"] is None


SENDS = ("connect", "sendto", "sendmsg", "sendmmsg")


def _connects(mode, pw, cmd, wd, home, *args):
    """Run the audit in a network namespace of the test's own (only a down
    loopback: nothing can leave it) under strace; returns the inet connect
    calls it made and the process. CONFINE_AUDIT_METADATA is not set, so a
    connect goes to the real default address, and fails inside the namespace."""
    fd, trace = tempfile.mkstemp(prefix="confine-audit-strace-")
    os.close(fd)
    # unshare and strace need root: they come first, the account switch after them
    who = (["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
            "--", "env", "-i", f"HOME={pw.pw_dir}", f"USER={pw.pw_name}"]
           if mode == "user" else ["env", "-i", "HOME=/root", "USER=root"])
    # --seccomp-bpf: only the traced calls stop the process. Without it every system
    # call does, and the audit's own calls made each run take 6-12 s on a loaded machine.
    # A datagram sent with an address (sendto, sendmsg) needs no connect: traced too.
    argv = (["unshare", "-n", "--", "strace", "-f", "--seccomp-bpf", "-qq", "-e",
             f"trace={','.join(SENDS)}", "-o",
             trace, *who, f"PATH={BASE_PATH}", "LANG=C.UTF-8", *cmd, "audit", "--json",
             "-w", wd, "--home", home, *args])
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=wd)
        with open(trace) as f:
            calls = [ln for ln in f if "AF_INET" in ln
                     and any(f"{c}(" in ln for c in SENDS)]
    finally:
        os.unlink(trace)
    return calls, p


@pytest.mark.parametrize("mode", MODES)
def test_audit_sends_nothing_without_connect(test_user, confine_cmd, planted, wd, mode):
    """Issue 21 item 8: no inet connect at all by default; the report names the
    skipped check and how to run it. Control: --connect does try."""
    if not shutil.which("strace"):
        pytest.skip("needs strace")
    calls, p = _connects(mode, test_user, confine_cmd, wd, planted.home)
    r = parse(p)
    assert calls == [], calls
    assert "metadata" not in _ids(r)
    sk = {s["id"]: s for s in r["skipped"]}
    assert "169.254.169.254:80" in sk["metadata"]["check"]
    assert sk["metadata"]["run"] == "confine audit --connect"
    calls, p = _connects(mode, test_user, confine_cmd, wd, planted.home, "--connect")
    r = parse(p)
    assert any("169.254.169.254" in c for c in calls), calls
    assert r["skipped"] == [] and "metadata" in _ids(r)


def test_audit_human_output_names_skipped_checks(test_user, confine_cmd, planted, wd):
    p = Runner("root", test_user, confine_cmd)("audit", "-w", wd, "--home", planted.home)
    assert "skipped (they send traffic)" in p.stdout, p.stdout[-800:]
    assert "run: confine audit --connect" in p.stdout


@pytest.mark.parametrize("args,needle", [
    (("--home", "/nonexistent-confine-home"), "--home"),
    (("--socket-dir", "/nonexistent-confine-run"), "--socket-dir"),
    (("-p", "no-such-profile"), "unknown profile"),
])
def test_audit_bad_input(test_user, confine_cmd, wd, args, needle):
    p = Runner("root", test_user, confine_cmd)("audit", "-w", wd, *args)
    assert p.returncode == 125 and needle in p.stderr, (p.returncode, p.stderr)


def test_audit_root_equivalent_groups(monkeypatch, tmp_path):
    """Group memberships (in-process, with the group database faked): kept groups
    are judged by what the profile does to the resource behind them."""
    import pwd as _pwd

    from confine import plan as _plan
    from confine.plan.identity import Identity
    from confine.policy import load as _load
    from confine.probe import audit
    me = _pwd.getpwuid(os.geteuid())
    wd = tmp_path / "wd"
    wd.mkdir()
    ident = Identity(uid=os.geteuid(), gid=os.getegid(), user=me.pw_name, home=str(tmp_path),
                     switch=False, started_as_root=False)
    pol = _load.load("default", workdir=str(wd), home=str(tmp_path), tmp=str(tmp_path))
    plan = _plan.compile(pol, ["true"], ident, _plan.HostFacts.read(os.geteuid() == 0),
                         parent_env={})
    names = {60001: "docker", 60002: "disk", 60003: "sudo", 60004: "adm", 60005: "users"}
    monkeypatch.setattr(audit.os, "getgroups", lambda: list(names))
    monkeypatch.setattr(audit, "_group_name", lambda gid: names.get(gid, str(gid)))
    found = {f["id"]: f for f in audit._groups(plan, ident, launch_root=False)}
    assert set(found) == {"group:docker", "group:disk", "group:sudo", "group:adm"}
    assert found["group:docker"]["severity"] == "high"
    assert found["group:docker"]["blocked"] is (plan.abi >= 9 or plan.unix_mediation)
    assert found["group:disk"]["blocked"] is True
    assert found["group:sudo"]["blocked"] is True and "no_new_privs" in found["group:sudo"]["by"]
    assert found["group:adm"]["severity"] == "low"
    dropped = {f["id"]: f for f in audit._groups(plan, ident, launch_root=True)}
    assert all(f["blocked"] for f in dropped.values())

"""An agent's login file as placeholders (issue 24 item 3): Claude Code, signed in with a
subscription login (~/.claude/.credentials.json) and no API key, does one tool-using turn
under its own profile; the model (mock_model.py, on HTTPS as api.anthropic.com in the
test's own network namespace, its certificate given as network.upstream_ca) answers only
requests carrying the real access token, so the turn working shows the gateway swapped it
in. The command the model asks for copies what the agent sees of the login file into the
workdir: a copy of the same shape whose tokens are placeholders (the control: the same file
read outside holds the real ones). No real token is in the workdir or in --log. As root
with --user and as the account itself.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import string
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator

import pytest
from conftest import make_workdir, write_owned

from .conftest import HERE
from .test_agent_clis import _argv, _fresh_home, agent_sandbox  # noqa: F401 - the fixture

NS_A, NS_B = "confine-logins-a", "confine-logins-b"
ORIGIN = "1.1.1.1"            # on B's loopback: only this test's namespaces have it
COMMAND = "cat ~/.claude/.credentials.json > seen.json; echo ok > proof.txt"
_ALNUM = string.ascii_letters + string.digits


def _token(prefix: str, n: int) -> str:
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(n))


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _down() -> None:
    for ns in (NS_A, NS_B):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    shutil.rmtree(f"/etc/netns/{NS_A}", ignore_errors=True)


class Origin:
    def __init__(self, d: str, log: str, ca: str, access: str):
        self.d, self.log, self.ca, self.access = d, log, ca, access

    def requests(self) -> list[dict]:
        with open(self.log) as f:
            return [e for e in map(json.loads, f) if "method" in e]


@pytest.fixture(scope="module")
def origin(agent_clis: str) -> Iterator[Origin]:
    """api.anthropic.com at 1.1.1.1:443 (HTTPS, a test CA) with its DNS, in namespace B;
    A's only route is the veth to B."""
    _down()
    d = tempfile.mkdtemp(prefix="confine-logins-")
    os.chmod(d, 0o755)
    server = None
    try:
        _sh("ip", "netns", "add", NS_A)
        _sh("ip", "netns", "add", NS_B)
        _sh("ip", "-n", NS_A, "link", "add", "cflg-a", "type", "veth", "peer", "name", "cflg-b",
            "netns", NS_B)
        for ns, dev, addr in ((NS_A, "cflg-a", "10.232.0.1/30"), (NS_B, "cflg-b", "10.232.0.2/30")):
            _sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh("ip", "-n", NS_A, "route", "add", "default", "via", "10.232.0.2")
        _sh("ip", "-n", NS_B, "addr", "add", f"{ORIGIN}/32", "dev", "lo")
        os.makedirs(f"/etc/netns/{NS_A}", exist_ok=True)
        with open(f"/etc/netns/{NS_A}/resolv.conf", "w") as f:
            f.write(f"nameserver {ORIGIN}\n")
        ca, key = os.path.join(d, "ca.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", ca,
                        "-days", "2", "-subj", "/CN=api.anthropic.com", "-addext",
                        "subjectAltName=DNS:api.anthropic.com"],
                       check=True, capture_output=True, timeout=30)
        os.chmod(ca, 0o644)
        log = os.path.join(d, "requests.jsonl")
        access = _token("sk-ant-oat01-", 95)
        env = {**os.environ, "MOCK_TLS_CERT": ca, "MOCK_TLS_KEY": key, "MOCK_BEARER": access,
               "MOCK_DNS": f"api.anthropic.com={ORIGIN}"}
        server = subprocess.Popen(["ip", "netns", "exec", NS_B, sys.executable,
                                   os.path.join(HERE, "mock_model.py"), ORIGIN, "443", log,
                                   COMMAND], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        end = time.monotonic() + 15
        while not (os.path.exists(log) and os.path.getsize(log)):
            assert server.poll() is None and time.monotonic() < end, "mock model did not start"
            time.sleep(0.05)
        yield Origin(d, log, ca, access)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        _down()
        shutil.rmtree(d, ignore_errors=True)


def test_claude_login_is_a_placeholder_copy(agent_sandbox, agent_clis, origin):  # noqa: F811
    sb = agent_sandbox
    _fresh_home(sb.agent)
    refresh = _token("sk-ant-ort01-", 95)
    login = {"claudeAiOauth": {"accessToken": origin.access, "refreshToken": refresh,
                               "expiresAt": int((time.time() + 3600) * 1000),
                               "scopes": ["user:inference", "user:profile"],
                               "subscriptionType": "max"}}
    os.makedirs(os.path.join(sb.home, ".claude"), exist_ok=True)
    os.chown(os.path.join(sb.home, ".claude"), sb.agent.pw_uid, sb.agent.pw_gid)
    real = write_owned(os.path.join(sb.home, ".claude", ".credentials.json"), json.dumps(login),
                       sb.agent, mode=0o600)
    # the onboarding Claude Code asks Anthropic's servers for, done
    write_owned(os.path.join(sb.home, ".claude.json"),
                json.dumps({"hasCompletedOnboarding": True}), sb.agent, mode=0o600)
    logdir = make_workdir(sb.agent)
    log = os.path.join(logdir, "run.jsonl")
    prof = write_owned(os.path.join(logdir, "claude-login.yaml"), textwrap.dedent(f"""
        extends: claude-code
        network:
          upstream_ca: [{origin.ca}]
        """), sb.pw)
    try:
        started = time.monotonic()
        p = subprocess.run(["ip", "netns", "exec", NS_A] + sb.exec_cmd(
            _argv(agent_clis, "claude"), "-p", prof, "--log", log), capture_output=True,
            text=True, timeout=120, cwd=sb.workdir, stdin=subprocess.DEVNULL)
        took = time.monotonic() - started
        said = p.stdout + p.stderr
        with open(log) as f:
            logged = f.read()
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    got = origin.requests()
    # the model answered: the real token reached it (it refuses anything else)
    assert p.returncode == 0, (said, [(r["path"], r.get("kind")) for r in got])
    assert os.path.exists(os.path.join(sb.workdir, "proof.txt")), said
    assert any(r.get("kind") == "final" for r in got), said
    with open(os.path.join(sb.workdir, "seen.json")) as f:
        seen = json.load(f)["claudeAiOauth"]
    with open(real) as f:
        outside = json.load(f)["claudeAiOauth"]   # the control: the real file, read outside
    assert outside["accessToken"] == origin.access and outside["refreshToken"] == refresh
    for k, v in (("accessToken", origin.access), ("refreshToken", refresh)):
        assert seen[k] != v and len(seen[k]) == len(v) and seen[k][:13] == v[:13], k
    assert seen["expiresAt"] == login["claudeAiOauth"]["expiresAt"]
    for secret in (origin.access, refresh):
        assert secret not in logged and secret not in said
        for root, _dirs, files in os.walk(sb.workdir):
            for n in files:
                with open(os.path.join(root, n), "rb") as f:
                    assert secret.encode() not in f.read(), n
    assert took < 60, took

"""An agent's login file as placeholders (issue 24 item 3): Claude Code, signed in with a
subscription login (~/.claude/.credentials.json) and no API key, does one tool-using turn
under its own profile; the model (mock_model.py, on HTTPS as api.anthropic.com in the
test's own network namespace, its certificate given as network.upstream_ca) answers only
requests carrying the real access token, so the turn working shows the gateway swapped it
in. The command the model asks for copies what the agent sees of the login file into the
workdir: a copy of the same shape whose tokens are placeholders (the control: the same file
read outside holds the real ones). No real token is in the workdir or in --log. As root
with --user and as the account itself.

The refresh (test_refresh_through_the_gateway): a client inside refreshes the login the
way Claude Code does (POST platform.claude.com/v1/oauth/token, the refresh token from its
copy in a JSON body; the mock's endpoint wants the real one) and calls the model with the
access token it got back: the real file then holds the endpoint's new real tokens, the
client new placeholders, and the model the new real access token.

The agents' own refresh (test_claude_refreshes_its_own_login,
test_codex_refreshes_its_own_login): the real CLIs, their access tokens expired, refresh
and save their logins themselves (a temporary file renamed over the bound copy) and finish
the turn; the real file holds the new real tokens and the stamps (expiresAt,
last_refresh), nothing the agent wrote or printed holds a real token, and a second Claude
Code run needs no refresh. test_claude_refresh_refused: the endpoint refuses, the CLI
fails inside as outside, the real file is untouched.
"""
from __future__ import annotations

import base64
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
from conftest import Sandbox, make_workdir, write_owned

from .conftest import HERE
from .test_agent_clis import _argv, _fresh_home, agent_sandbox  # noqa: F401 - the fixture

NS_A, NS_B = "confine-logins-a", "confine-logins-b"
ORIGIN = "1.1.1.1"            # on B's loopback: only this test's namespaces have it
# what the agent sees of its login and its environment, copied where the test reads them
COMMAND = ("cat ~/.claude/.credentials.json > seen.json; env > env.txt; "
           "cat ~/.codex/auth.json > seen-codex.json; echo ok > proof.txt")
_ALNUM = string.ascii_letters + string.digits


def _token(prefix: str, n: int) -> str:
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(n))


def _jwt(claims: dict) -> str:
    """A JWT of the shape Codex's OAuth issuer gives (its signature is random here)."""
    def b64(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
    return f"{b64({'alg': 'RS256', 'typ': 'JWT'})}.{b64(claims)}.{_token('', 86)}"


# what Codex reads of its id_token: the account and plan of a ChatGPT sign-in
ID_CLAIMS = {"email": "agent@example.test", "exp": 4102444800,
             "https://api.openai.com/auth": {"chatgpt_plan_type": "pro",
                                             "chatgpt_user_id": "user-confine",
                                             "chatgpt_account_id": "acct-confine"}}
HOSTS = ("api.anthropic.com", "platform.claude.com", "chatgpt.com", "auth.openai.com")


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _down() -> None:
    for ns in (NS_A, NS_B):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    shutil.rmtree(f"/etc/netns/{NS_A}", ignore_errors=True)


class Origin:
    def __init__(self, d: str, log: str, ca: str, tokens: dict[str, str]):
        self.d, self.log, self.ca, self.tokens = d, log, ca, tokens
        self.access = tokens["MOCK_BEARER"]

    def clear(self) -> None:
        with open(self.log, "w") as f:
            f.write('{"ev": "cleared"}\n')

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
                        "subjectAltName=" + ",".join(f"DNS:{h}" for h in HOSTS)],
                       check=True, capture_output=True, timeout=30)
        os.chmod(ca, 0o644)
        log = os.path.join(d, "requests.jsonl")
        tokens = {"MOCK_BEARER": _token("sk-ant-oat01-", 95),
                  "MOCK_REFRESH": _token("sk-ant-ort01-", 95),
                  "MOCK_NEW_ACCESS": _token("sk-ant-oat01-", 95),
                  "MOCK_NEW_REFRESH": _token("sk-ant-ort01-", 95),
                  "MOCK_CODEX_REFRESH": _token("rt_", 60),
                  "MOCK_CODEX_NEW_ACCESS": _jwt({"exp": int(time.time()) + 3600}),
                  "MOCK_CODEX_NEW_REFRESH": _token("rt_", 60),
                  "MOCK_CODEX_NEW_ID": _jwt(ID_CLAIMS)}
        env = {**os.environ, **tokens, "MOCK_TLS_CERT": ca, "MOCK_TLS_KEY": key,
               "MOCK_DNS": ",".join(f"{h}={ORIGIN}" for h in HOSTS)}
        server = subprocess.Popen(["ip", "netns", "exec", NS_B, sys.executable,
                                   os.path.join(HERE, "mock_model.py"), ORIGIN, "443", log,
                                   COMMAND], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        end = time.monotonic() + 15
        while not (os.path.exists(log) and os.path.getsize(log)):
            assert server.poll() is None and time.monotonic() < end, "mock model did not start"
            time.sleep(0.05)
        yield Origin(d, log, ca, tokens)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        _down()
        shutil.rmtree(d, ignore_errors=True)


def test_claude_login_is_a_placeholder_copy(agent_sandbox, agent_clis, origin):  # noqa: F811
    sb = agent_sandbox
    _fresh_home(sb.agent)
    origin.clear()
    refresh = origin.tokens["MOCK_REFRESH"]
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
    kinds = [r.get("kind") for r in got]
    assert "refresh" not in kinds, kinds
    now = (origin.access, refresh)
    assert seen["expiresAt"] == login["claudeAiOauth"]["expiresAt"]
    assert (outside["accessToken"], outside["refreshToken"]) == now
    for k, v in zip(("accessToken", "refreshToken"), now):
        assert seen[k] != v and len(seen[k]) == len(v) and seen[k][:13] == v[:13], k
    for secret in (*origin.tokens.values(),):
        assert secret not in logged and secret not in said
        for root, _dirs, files in os.walk(sb.workdir):
            for n in files:
                with open(os.path.join(root, n), "rb") as f:
                    assert secret.encode() not in f.read(), n
    assert took < 60, took


REFRESH_SH = r"""
import http.client, json, os, ssl, sys, urllib.error, urllib.request
c = json.load(open(os.path.expanduser("~/.claude/.credentials.json")))["claudeAiOauth"]
json.dump(c, open("seen.json", "w"))
ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
def post(url, body, auth=None, extra=()):
    h = {"Content-Type": "application/json", **dict(extra)}
    if auth:
        h["Authorization"] = "Bearer " + auth
    r = urllib.request.Request(url, json.dumps(body).encode(), h, method="POST")
    try:
        with urllib.request.urlopen(r, context=ctx, timeout=20) as f:
            return f.status, f.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, http.client.HTTPException) as e:
        return 0, repr(e).encode()
st, body = post("https://platform.claude.com/v1/oauth/token",
                {"grant_type": "refresh_token", "refresh_token": c["refreshToken"],
                 "client_id": "confine-test"})
print("refresh", st)
open("answer.json", "wb").write(body)
new = json.loads(body)
st, _ = post("https://api.anthropic.com/v1/messages",
             {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
             new["access_token"])
print("messages", st)
st, _ = post("https://api.anthropic.com/v1/messages", {"model": "m", "max_tokens": 5,
             "messages": [{"role": "user", "content": c["refreshToken"]}]}, new["access_token"])
print("elsewhere", st)
# an answer the gateway cannot read (encoded): cut, never passed on
st, body = post("https://platform.claude.com/v1/oauth/token",
                {"grant_type": "refresh_token", "refresh_token": new["refresh_token"]},
                extra=[("X-Mock-Answer", "gzip")])
print("unreadable", st)
"""


def test_refresh_through_the_gateway(agent_sandbox, origin):  # noqa: F811
    sb = agent_sandbox
    _fresh_home(sb.agent)
    origin.clear()
    old_access = _token("sk-ant-oat01-", 95)      # expired: the model no longer takes it
    login = {"claudeAiOauth": {"accessToken": old_access,
                               "refreshToken": origin.tokens["MOCK_REFRESH"],
                               "expiresAt": int((time.time() - 60) * 1000), "scopes": []}}
    d = os.path.join(sb.home, ".claude")
    os.makedirs(d, exist_ok=True)
    os.chown(d, sb.agent.pw_uid, sb.agent.pw_gid)
    real = write_owned(os.path.join(d, ".credentials.json"), json.dumps(login), sb.agent,
                       mode=0o600)
    logdir = make_workdir(sb.agent)
    log = os.path.join(logdir, "run.jsonl")
    prof = write_owned(os.path.join(logdir, "claude-login.yaml"), textwrap.dedent(f"""
        extends: claude-code
        network:
          upstream_ca: [{origin.ca}]
        """), sb.pw)
    try:
        p = subprocess.run(["ip", "netns", "exec", NS_A] + sb.exec_cmd(
            ["python3", "-c", REFRESH_SH], "-p", prof, "--log", log), capture_output=True,
            text=True, timeout=60, cwd=sb.workdir, stdin=subprocess.DEVNULL)
        said = p.stdout + p.stderr
        with open(log) as f:
            logged = f.read()
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    new_access, new_refresh = origin.tokens["MOCK_NEW_ACCESS"], origin.tokens["MOCK_NEW_REFRESH"]
    # the endpoint got the real refresh token (it answers 400 to anything else), the model
    # the new real access token (401 to anything else)
    assert "refresh 200" in p.stdout and "messages 200" in p.stdout, said
    got = origin.requests()
    # the second refresh (new placeholder -> new real token) was answered, but encoded:
    # the agent got no answer, the control (the first) got one
    assert "unreadable 0" in p.stdout, said
    assert [r.get("kind") for r in got if r["path"].endswith("/oauth/token")] == ["refresh"] * 2
    assert any(r["headers"].get("Authorization") == f"Bearer {new_access}" for r in got)
    # a refresh token's placeholder anywhere else (a body toward the model) is not swapped:
    # refused as an attempted disclosure, the model got nothing of that request
    assert "elsewhere 403" in p.stdout, said
    bodies = json.dumps([r.get("body") for r in got if r["path"].startswith("/v1/messages")])
    assert login["claudeAiOauth"]["refreshToken"] not in bodies and "sk-ant-ort01-" not in bodies
    assert '"the body"' in logged and "attempted disclosure" in logged, logged[-2000:]
    with open(os.path.join(sb.workdir, "answer.json")) as f:
        answer = json.load(f)
    for k, v in (("access_token", new_access), ("refresh_token", new_refresh)):
        assert answer[k] != v and len(answer[k]) == len(v) and answer[k][:13] == v[:13], k
    with open(real) as f:
        outside = json.load(f)["claudeAiOauth"]     # the real store, read outside
    assert (outside["accessToken"], outside["refreshToken"]) == (new_access, new_refresh)
    st = os.stat(real)
    assert (st.st_uid, st.st_mode & 0o777) == (sb.agent.pw_uid, 0o600)
    assert '"action": "refreshed"' in logged or '"action":"refreshed"' in logged, logged[-2000:]
    for secret in (*origin.tokens.values(), old_access):
        assert secret not in logged and secret not in said
        for root, _dirs, files in os.walk(sb.workdir):
            for n in files:
                with open(os.path.join(root, n), "rb") as f:
                    assert secret.encode() not in f.read(), n


def _plant_claude(sb, login: dict) -> str:
    """The agent's account signed in to Claude Code (its login file, 0600, and the
    onboarding that asks Anthropic's servers, done); returns the real file's path."""
    d = os.path.join(sb.home, ".claude")
    os.makedirs(d, exist_ok=True)
    os.chown(d, sb.agent.pw_uid, sb.agent.pw_gid)
    write_owned(os.path.join(sb.home, ".claude.json"),
                json.dumps({"hasCompletedOnboarding": True}), sb.agent, mode=0o600)
    return write_owned(os.path.join(d, ".credentials.json"), json.dumps(login), sb.agent,
                       mode=0o600)


# one turn of each CLI signed in (no API key, no provider of the test's: its own hosts)
TURN = {"claude": ["claude", "-p", "Run the command.", "--allowedTools", "Bash"],
        # its own provider's ChatGPT backend first asks for workspace routing the mock
        # does not know; a provider of the same URL that uses the sign-in does not
        "codex": ["codex", "exec", "--skip-git-repo-check", "-s", "danger-full-access",
                  "-m", "mock-model", "-c", "model_provider=chatgpt",
                  "-c", 'model_providers.chatgpt={name="chatgpt", base_url='
                        '"https://chatgpt.com/backend-api/codex", wire_api="responses", '
                        'requires_openai_auth=true}',
                  "Run the command."]}
PROFILE = {"claude": "claude-code", "codex": "codex"}


def _turn(sb, agent_clis: str, origin: Origin, cli: str = "claude"
          ) -> tuple[subprocess.CompletedProcess, str, str]:
    """One turn of the real CLI under its profile (trusting the test CA upstream):
    (the process, what it said, the run's --log)."""
    logdir = make_workdir(sb.agent)
    log = os.path.join(logdir, "run.jsonl")
    prof = write_owned(os.path.join(logdir, "login.yaml"), textwrap.dedent(f"""
        extends: {PROFILE[cli]}
        network:
          upstream_ca: [{origin.ca}]
        """), sb.pw)
    argv = [os.path.join(agent_clis, TURN[cli][0]), *TURN[cli][1:]]
    try:
        p = subprocess.run(["ip", "netns", "exec", NS_A] + sb.exec_cmd(
            argv, "-p", prof, "--log", log), capture_output=True,
            text=True, timeout=120, cwd=sb.workdir, stdin=subprocess.DEVNULL)
        with open(log) as f:
            return p, p.stdout + p.stderr, f.read()
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def _nowhere(sb, secrets_: list[str], *texts: str) -> None:
    """No real token in what confine and the agent said, the log, or any file the agent
    wrote in the workdir (its view of the login, its environment)."""
    for secret in secrets_:
        for t in texts:
            assert secret not in t
        for root, _dirs, files in os.walk(sb.workdir):
            for n in files:
                with open(os.path.join(root, n), "rb") as f:
                    assert secret.encode() not in f.read(), n


def test_claude_refreshes_its_own_login(agent_sandbox, agent_clis, origin):  # noqa: F811
    """The real Claude Code, its access token expired: it refreshes through the gateway
    (the endpoint wants the real refresh token), the model (which wants the new real
    access token) answers the turn, the real file holds the new real tokens with the rest
    of it kept, the agent saw only placeholders; a second run starts from the refreshed
    login (no refresh: the access token and its expiry came back)."""
    sb = agent_sandbox
    _fresh_home(sb.agent)
    origin.clear()
    old_access = _token("sk-ant-oat01-", 95)      # expired: the model no longer takes it
    login = {"claudeAiOauth": {"accessToken": old_access,
                               "refreshToken": origin.tokens["MOCK_REFRESH"],
                               "expiresAt": int((time.time() - 60) * 1000),
                               "scopes": ["user:inference", "user:profile"],
                               "subscriptionType": "max"},
             "other": {"kept": True}}
    real = _plant_claude(sb, login)
    p, said, logged = _turn(sb, agent_clis, origin)
    got = origin.requests()
    kinds = [r.get("kind") for r in got]
    new_access, new_refresh = origin.tokens["MOCK_NEW_ACCESS"], origin.tokens["MOCK_NEW_REFRESH"]
    assert p.returncode == 0, (said, kinds)
    assert "refresh" in kinds and "final" in kinds, (kinds, said)
    assert os.path.exists(os.path.join(sb.workdir, "proof.txt")), said
    with open(real) as f:
        outside = json.load(f)          # the real store, read outside
    o = outside["claudeAiOauth"]
    assert (o["accessToken"], o["refreshToken"]) == (new_access, new_refresh)
    assert outside["other"] == {"kept": True} and o["subscriptionType"] == "max"
    assert o["expiresAt"] > time.time() * 1000, o     # the agent's new expiry, written back
    st = os.stat(real)
    assert (st.st_uid, st.st_mode & 0o777) == (sb.agent.pw_uid, 0o600)
    with open(os.path.join(sb.workdir, "seen.json")) as f:
        seen = json.load(f)["claudeAiOauth"]    # the agent's own file after its refresh
    for k, v in (("accessToken", new_access), ("refreshToken", new_refresh)):
        assert seen[k] != v and len(seen[k]) == len(v) and seen[k][:13] == v[:13], k
    assert any(r["headers"].get("Authorization") == f"Bearer {new_access}" for r in got)
    all_tokens = [*origin.tokens.values(), old_access]
    _nowhere(sb, all_tokens, said, logged)
    if sb.mode != "root":
        return      # the second run once (time): the same start as the first, as root
    # the second run: the refreshed login, no refresh needed
    origin.clear()
    for n in ("proof.txt", "seen.json"):
        os.unlink(os.path.join(sb.workdir, n))
    p, said, logged = _turn(sb, agent_clis, origin)
    kinds = [r.get("kind") for r in origin.requests()]
    assert p.returncode == 0 and "final" in kinds and "refresh" not in kinds, (kinds, said)
    _nowhere(sb, all_tokens, said, logged)


def test_codex_refreshes_its_own_login(agent_sandbox, agent_clis, origin):  # noqa: F811
    """The real Codex signed in with ChatGPT, its login due for a refresh (access token
    expired, last refresh long ago): it refreshes through the gateway (auth.openai.com
    wants the real refresh token), the model on chatgpt.com wants the new real access
    token; the real auth.json holds the new real tokens and a new last_refresh, the
    agent saw placeholders (its JWTs' claims readable, their signatures not)."""
    sb = agent_sandbox
    _fresh_home(sb.agent)
    origin.clear()
    t = origin.tokens
    old_access = _jwt({"exp": int(time.time()) - 3600})
    old_id = _jwt(ID_CLAIMS)
    login = {"OPENAI_API_KEY": None,
             "tokens": {"id_token": old_id, "access_token": old_access,
                        "refresh_token": t["MOCK_CODEX_REFRESH"], "account_id": "acct-confine"},
             "last_refresh": "2026-01-01T00:00:00Z"}
    d = os.path.join(sb.home, ".codex")
    os.makedirs(d, exist_ok=True)
    os.chown(d, sb.agent.pw_uid, sb.agent.pw_gid)
    real = write_owned(os.path.join(d, "auth.json"), json.dumps(login), sb.agent, mode=0o600)
    p, said, logged = _turn(sb, agent_clis, origin, "codex")
    got = origin.requests()
    kinds = [r.get("kind") for r in got]
    assert p.returncode == 0, (said[-3000:], kinds)
    assert "refresh" in kinds and "final" in kinds, (kinds, said[-3000:])
    with open(real) as f:
        outside = json.load(f)
    new = {"access_token": t["MOCK_CODEX_NEW_ACCESS"], "refresh_token": t["MOCK_CODEX_NEW_REFRESH"],
           "id_token": t["MOCK_CODEX_NEW_ID"]}
    assert {k: outside["tokens"][k] for k in new} == new
    assert outside["tokens"]["account_id"] == "acct-confine" and outside["OPENAI_API_KEY"] is None
    assert outside["last_refresh"] > login["last_refresh"], outside["last_refresh"]
    with open(os.path.join(sb.workdir, "seen-codex.json")) as f:
        seen = json.load(f)["tokens"]
    for k, v in new.items():
        assert seen[k] != v and len(seen[k]) == len(v), k
    assert seen["id_token"].rsplit(".", 1)[0] == new["id_token"].rsplit(".", 1)[0]
    assert any({k.lower(): v for k, v in r["headers"].items()}.get("authorization")
               == f"Bearer {new['access_token']}" for r in got if r.get("kind") == "final")
    _nowhere(sb, [t["MOCK_CODEX_REFRESH"], *new.values(), old_access.rsplit(".", 1)[1],
                  old_id.rsplit(".", 1)[1]], said, logged)


@pytest.fixture(params=["user"])
def one_sandbox(request, confine_bin, agent_clis, agent_user):
    """The unprivileged case only (the root --user one is covered by the tests above)."""
    wd = make_workdir(agent_user)
    yield Sandbox(request.param, agent_user, wd)
    shutil.rmtree(wd, ignore_errors=True)


def test_claude_refresh_refused(one_sandbox, agent_clis, origin):
    """The token endpoint refuses the refresh (invalid_grant): Claude Code fails inside as
    it does outside (the control: the same login, the same endpoint, unconfined), and the
    real file is left exactly as it was."""
    sb = one_sandbox
    _fresh_home(sb.agent)
    login = {"claudeAiOauth": {"accessToken": _token("sk-ant-oat01-", 95),
                               "refreshToken": origin.tokens["MOCK_REFRESH"],
                               "expiresAt": int((time.time() - 60) * 1000),
                               "scopes": ["user:inference", "user:profile"]}}
    real = _plant_claude(sb, login)
    with open(real, "rb") as f:
        before = f.read()
    refuse = origin.log + ".refuse"
    open(refuse, "w").close()
    try:
        outside = subprocess.run(["ip", "netns", "exec", NS_A] + sb.outside_cmd(
            [os.path.join(agent_clis, TURN["claude"][0]), *TURN["claude"][1:]],
            env_extra=[f"NODE_EXTRA_CA_CERTS={origin.ca}"]), capture_output=True, text=True,
            timeout=120, cwd=sb.workdir, stdin=subprocess.DEVNULL)
        outside_kinds = [r.get("kind") for r in origin.requests()]
        origin.clear()
        _fresh_home(sb.agent)       # nothing the outside run left (it marks a failed refresh)
        _plant_claude(sb, login)
        p, said, logged = _turn(sb, agent_clis, origin)
    finally:
        os.unlink(refuse)
    kinds = [r.get("kind") for r in origin.requests()]
    assert outside.returncode != 0 and "bad-refresh" in outside_kinds, (
        outside_kinds, outside.stdout + outside.stderr)
    assert p.returncode == outside.returncode, (said, outside.stdout + outside.stderr)
    assert "bad-refresh" in kinds and "final" not in kinds, kinds
    assert not os.path.exists(os.path.join(sb.workdir, "proof.txt"))
    with open(real, "rb") as f:
        assert f.read() == before
    assert '"refreshed"' not in logged
    _nowhere(sb, [*origin.tokens.values(), login["claudeAiOauth"]["accessToken"]], said, logged)


SAVE_PY = r"""
import json, os, sys
d = os.path.expanduser("~/.codex")
auth = json.load(open(os.path.join(d, "auth.json")))
auth["last_refresh"] = "2030-01-01T00:00:00Z"
for name, target in (("auth.json", "saved"), ("config.toml", "protected")):
    tmp = os.path.join(d, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(auth) if name == "auth.json" else "model = 'x'\n")
    try:
        os.replace(tmp, os.path.join(d, name))
        print(target, "ok")
    except OSError as e:
        print(target, e.errno)
print("now", json.load(open(os.path.join(d, "auth.json")))["last_refresh"])
"""


def test_a_save_renamed_onto_the_copy(agent_sandbox, agent_clis):  # noqa: F811
    """A save by a temporary file renamed over the login's bound copy (what Codex does)
    works inside and changes the copy only; the same rename onto a protected file bound
    read-only (config.toml) is still refused."""
    sb = agent_sandbox
    _fresh_home(sb.agent)
    d = os.path.join(sb.home, ".codex")
    os.makedirs(d)
    os.chown(d, sb.agent.pw_uid, sb.agent.pw_gid)
    login = {"OPENAI_API_KEY": None, "last_refresh": "2026-01-01T00:00:00Z",
             "tokens": {"access_token": _jwt({"exp": 1}), "refresh_token": _token("rt_", 60)}}
    real = write_owned(os.path.join(d, "auth.json"), json.dumps(login), sb.agent, mode=0o600)
    write_owned(os.path.join(d, "config.toml"), "", sb.agent, mode=0o600)
    with open(real, "rb") as f:
        before = f.read()
    p = subprocess.run(sb.exec_cmd(["python3", "-c", SAVE_PY], "-p", "codex"),
                       capture_output=True, text=True, timeout=60, cwd=sb.workdir,
                       stdin=subprocess.DEVNULL)
    said = p.stdout + p.stderr
    assert p.returncode == 0, said
    assert "saved ok" in p.stdout and "now 2030-01-01T00:00:00Z" in p.stdout, said
    assert "protected ok" not in p.stdout, said
    with open(real, "rb") as f:
        assert f.read() == before       # the agent's save reached its copy only
    with open(os.path.join(d, "config.toml")) as f:
        assert f.read() == ""


# a refresh's record as a supervisor killed in its in-place write leaves it
# (credentials/redo.py), written by the launching account with confine's own code
PLANT_PY = r"""
import sys
from confine.credentials import redo
with open(sys.argv[1], "rb") as f:
    redo.Record("claude-code", sys.argv[1], sys.stdin.buffer.read(), f.read()).close()
"""


def test_a_login_write_cut_by_a_crash_is_redone_at_the_next_start(agent_sandbox):  # noqa: F811
    """The supervisor died between writing a refreshed login over the old one and cutting
    it to its length (the refresh token it replaced is spent): the real file is not JSON,
    the record in confine's state holds the new tokens. The next run restores the real
    file from it before the start, and the agent still reads placeholders only. The
    control: before that run, the file is the broken one."""
    from confine.credentials import redo
    from confine.paths import state_dir
    sb = agent_sandbox
    _fresh_home(sb.agent)
    old = {"claudeAiOauth": {"accessToken": _token("sk-ant-oat01-", 95),
                             "refreshToken": _token("sk-ant-ort01-", 95),
                             "expiresAt": 1, "scopes": ["user:inference"]},
           "other": {"kept": True}}
    new = json.loads(json.dumps(old))
    tokens = (_token("sk-ant-oat01-", 95), _token("sk-ant-ort01-", 95))
    new["claudeAiOauth"]["accessToken"], new["claudeAiOauth"]["refreshToken"] = tokens
    new_text = (json.dumps(new, indent=2) + "\n").encode()
    real = _plant_claude(sb, old)
    with open(real, "w") as f:
        f.write(json.dumps(old, indent=4))     # longer than the new text: a tail is left
    launcher = sb._as(sb.pw) + sb._env(sb.pw) if sb.mode == "user" else []
    records = state_dir("credentials", euid=sb.pw.pw_uid if sb.mode == "user" else 0,
                        home=sb.pw.pw_dir)

    def left() -> list[str]:
        return [n for n in os.listdir(records) if n.startswith(redo._prefix(real))]
    try:
        subprocess.run([*launcher, sys.executable, "-c", PLANT_PY, real], input=new_text,
                       check=True, capture_output=True, timeout=30)
        fd = os.open(real, os.O_WRONLY)
        try:
            os.pwrite(fd, new_text, 0)         # the write the crash cut before its truncate
        finally:
            os.close(fd)
        with open(real) as f, pytest.raises(ValueError):
            json.load(f)
        assert len(left()) == 1
        p = subprocess.run(sb.exec_cmd(["sh", "-c", "cat ~/.claude/.credentials.json > seen.json"],
                                       "-p", "claude-code"), capture_output=True, text=True,
                           timeout=60, cwd=sb.workdir, stdin=subprocess.DEVNULL)
        said = p.stdout + p.stderr
        assert p.returncode == 0, said
        assert "restored from the tokens a refresh got" in said, said
        assert left() == []
    finally:
        for n in left():                       # a failed run's, kept from the other tests
            os.unlink(os.path.join(records, n))
    with open(real, "rb") as f:
        assert f.read() == new_text            # the real file, read outside
    st = os.stat(real)
    assert (st.st_uid, st.st_mode & 0o777) == (sb.agent.pw_uid, 0o600)
    with open(os.path.join(sb.workdir, "seen.json")) as f:
        seen = json.load(f)["claudeAiOauth"]
    for k, v in zip(("accessToken", "refreshToken"), tokens):
        assert seen[k] != v and len(seen[k]) == len(v) and seen[k][:13] == v[:13], k
    _nowhere(sb, [*tokens, old["claudeAiOauth"]["refreshToken"]], said)

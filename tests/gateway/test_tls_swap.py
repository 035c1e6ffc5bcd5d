"""The credential swap at the gateway (issue 24 item 2): TLS terminated with the run CA,
the origin verified against a test CA given as upstream_ca, the placeholder replaced
only toward a bound target. Real clients (curl, git) through the gateway's proxy, real
HTTPS origins on loopback; every refusal has an allowed control beside it, and no
event ever holds the value."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from confine.credentials.binding import Binding, Target
from confine.credentials.ca import RunCA, write_bundle
from confine.credentials.swap import Swap

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")

VALUE = "real-secret-9f8e7d6c5b4a"
PLACEHOLDER = "confine-ph-0123456789ab"
CLEAN_ENV = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("GIT_")}


class Seen:
    """What the origin received: one dict per request, and the connections accepted."""

    def __init__(self):
        self.requests: list[dict] = []
        self.conns = 0
        self.lock = threading.Lock()


def digest(s):
    return None if s is None else hashlib.sha256(s.encode()).hexdigest()[:16]


def make_origin(ctx, seen, git_root=None):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def setup(self):
            super().setup()
            with seen.lock:
                seen.conns += 1

        def _body(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = b""
                while True:
                    n = int(self.rfile.readline().split(b";")[0], 16)
                    if not n:
                        while self.rfile.readline() not in (b"\r\n", b""):
                            pass
                        return out
                    out += self.rfile.read(n)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _any(self):
            body = self._body()
            rec = {"method": self.command, "path": self.path, "host": self.headers.get("Host"),
                   "auth": self.headers.get("Authorization"), "key": self.headers.get("X-Api-Key"),
                   "body": hashlib.sha256(body).hexdigest(), "len": len(body)}
            with seen.lock:
                seen.requests.append(rec)
            if git_root is not None:
                return self._git(body)
            # the answer names what arrived by digest: an origin echoing the value is its own
            # case (test_a_value_the_origin_echoes...), which the swap cuts
            out = {**rec, "auth": digest(rec["auth"]), "key": digest(rec["key"])}
            if self.path.startswith("/echo"):    # a debugging endpoint: the request's headers back
                out["echo"] = str(self.headers)
            out = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def _git(self, body):
            if self.headers.get("Authorization") != "Basic " + base64.b64encode(f"agent:{VALUE}".encode()).decode():
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="forge"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": git_root, "GIT_HTTP_EXPORT_ALL": "1",
                   "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
                   "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                   "REMOTE_USER": "agent", "REMOTE_ADDR": "127.0.0.1"}
            r = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=30)
            head, _, out = r.stdout.partition(b"\r\n\r\n")
            status = 200
            hdrs = []
            for line in head.split(b"\r\n"):
                k, _, v = line.decode().partition(":")
                if k.lower() == "status":
                    status = int(v.split()[0])
                elif k:
                    hdrs.append((k, v.strip()))
            self.send_response(status)
            for k, v in hdrs:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = do_PUT = _any

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    if ctx is not None:
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class Forge:
    """An HTTPS origin for allowed.test, other.test and also.test, its certificate from a
    test CA the gateway is given as upstream_ca (the system store does not know it)."""

    def __init__(self, tmp_path, git_root=None):
        self.test_ca = RunCA("confine test forge CA")
        self.ca_file = tmp_path / "forge-ca.pem"
        self.ca_file.write_bytes(self.test_ca.pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        contexts = {n: self.test_ca.server_context(n) for n in ("allowed.test", "other.test", "also.test")}
        ctx.sni_callback = lambda s, name, _c: setattr(s, "context", contexts[name]) if name in contexts else None
        ctx.load_cert_chain(*self._default(tmp_path))
        self.seen = Seen()
        self.srv = make_origin(ctx, self.seen, git_root)
        self.port = self.srv.server_address[1]

    def _default(self, tmp_path):
        pem = self.test_ca.leaf_pem("allowed.test") + self.test_ca._leaf_key_pem
        p = tmp_path / "forge-default.pem"
        p.write_bytes(pem)
        return (str(p),)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def forge(tmp_path):
    f = Forge(tmp_path)
    yield f
    f.close()


def binding(port, **kw):
    kw.setdefault("targets", (Target("allowed.test", port),))
    return Binding(name="FORGE_TOKEN", placeholder=PLACEHOLDER, value=VALUE, **kw)


@pytest.fixture
def swap_stack(make_stack, forge, tmp_path):
    """A gateway allowing the forge's port for three names, swapping FORGE_TOKEN toward
    allowed.test only; `bundle`: what the agent would trust (system + run CA)."""

    def make(bindings=None, upstream_ca=True, allow=None):
        p = forge.port
        # allowed_ips lets the names resolve to loopback (private otherwise)
        st = make_stack(allow or [f"allowed.test:{p}", f"other.test:{p}", f"also.test:{p}"],
                        allowed_ips=["127.0.0.1"])
        ca = RunCA()
        bundle = tmp_path / f"bundle-{id(ca)}.pem"
        write_bundle(ca, str(bundle))
        bs = binding(p) if bindings is None else bindings
        st.swap = Swap((bs,) if isinstance(bs, Binding) else bs, ca,
                       upstream_ca=[str(forge.ca_file)] if upstream_ca else [], emit=st._log)
        st.gw.credentials = st.swap
        st.bundle = bundle
        return st
    return make


def curl(st, url, *args, timeout=20):
    r = subprocess.run(["curl", "-sS", "--max-time", "15", "--proxy", f"http://127.0.0.1:{st.gw.port}",
                        "--cacert", str(st.bundle), *args, url],
                       capture_output=True, text=True, timeout=timeout, env=CLEAN_ENV)
    return r


def no_value_anywhere(st, *texts):
    blob = json.dumps(st.events) + "".join(texts)
    assert VALUE not in blob
    assert base64.b64encode(f"agent:{VALUE}".encode()).decode() not in blob


# --- the value reaches the bound host ---------------------------------------------------------------
def test_bearer_swapped_toward_bound_host_keepalive(swap_stack, forge):
    st = swap_stack()
    u = f"https://allowed.test:{forge.port}"
    r = curl(st, f"{u}/b", "-H", f"Authorization: Bearer {PLACEHOLDER}", f"{u}/a")
    assert r.returncode == 0, r.stderr
    got = [json.loads(x) for x in r.stdout.replace("}{", "}\n{").splitlines()]
    assert [g["path"] for g in got] == ["/a", "/b"]
    assert all(g["auth"] == digest(f"Bearer {VALUE}") for g in got)
    assert forge.seen.conns == 1, "keep-alive: both requests on one connection"
    ev = [e for e in st.wait_connects(1) if e.get("terminated")]
    assert ev and ev[0]["decision"] == "allow"
    uses = [e for e in st.events if e.get("event") == "credential_use"]
    assert [(u["name"], u["path"], u["decision"]) for u in uses] == [("FORGE_TOKEN", "/a", "allow"),
                                                                    ("FORGE_TOKEN", "/b", "allow")]
    no_value_anywhere(st, r.stdout, r.stderr)


def test_custom_header_and_chunked_body(swap_stack, forge, tmp_path):
    st = swap_stack(binding(forge.port, headers=("x-api-key",)))
    body = tmp_path / "body"
    body.write_bytes(os.urandom(300_000))
    r = curl(st, f"https://allowed.test:{forge.port}/up", "-H", f"X-Api-Key: {PLACEHOLDER}",
             "-H", "Transfer-Encoding: chunked", "--data-binary", f"@{body}")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["key"] == digest(VALUE) and got["len"] == 300_000
    assert got["body"] == hashlib.sha256(body.read_bytes()).hexdigest()
    # the same header is not a credential header for a binding that does not name it
    st2 = swap_stack()
    r = curl(st2, f"https://allowed.test:{forge.port}/x", "-H", f"X-Api-Key: {PLACEHOLDER}")
    assert "attempted disclosure" in r.stdout
    assert [q["path"] for q in forge.seen.requests] == ["/up"]


# --- refused ----------------------------------------------------------------------------------------
def test_placeholder_toward_other_allowed_host_refused(swap_stack, forge):
    st = swap_stack()
    r = curl(st, f"https://other.test:{forge.port}/steal", "-H", f"Authorization: Bearer {PLACEHOLDER}")
    assert "403" in r.stdout or "attempted disclosure" in r.stdout, (r.stdout, r.stderr)
    assert "confine: attempted disclosure: the placeholder of FORGE_TOKEN" in r.stdout
    # control: the same host without the placeholder is served (terminated, verified)
    r2 = curl(st, f"https://other.test:{forge.port}/ok", "-H", "Authorization: Bearer nothing-secret")
    assert r2.returncode == 0 and json.loads(r2.stdout)["auth"] == digest("Bearer nothing-secret")
    assert [q["path"] for q in forge.seen.requests] == ["/ok"]
    deny = [e for e in st.events if e.get("event") == "credential_use" and e.get("disclosure")]
    assert deny and deny[0]["host"] == "other.test" and deny[0]["decision"] == "deny"
    conns = st.wait_connects(2)
    assert any(e["decision"] == "deny" and "attempted disclosure" in e["reason"] for e in conns)
    no_value_anywhere(st, r.stdout, r.stderr)


@pytest.mark.parametrize("case", ["url", "path", "method", "other-header", "basic-other-host"])
def test_placeholder_outside_its_target_refused(swap_stack, forge, case):
    st = swap_stack(binding(forge.port, targets=(Target("allowed.test", forge.port, frozenset({"GET"}),
                                                        ("/api",)),)))
    u = f"https://allowed.test:{forge.port}"
    auth = ["-H", f"Authorization: Bearer {PLACEHOLDER}"]
    args = {"url": [f"{u}/api/x?t={PLACEHOLDER}"],
            "path": [*auth, f"{u}/api/../admin"],
            "method": [*auth, "-X", "DELETE", f"{u}/api/x"],
            "other-header": ["-H", f"X-Note: {PLACEHOLDER}", f"{u}/api/x"],
            "basic-other-host": ["-u", f"agent:{PLACEHOLDER}", f"https://also.test:{forge.port}/api/x"]}[case]
    r = curl(st, args[-1], "--path-as-is", *args[:-1])
    assert "confine: attempted disclosure" in r.stdout, (r.stdout, r.stderr)
    assert forge.seen.requests == []
    # control: the bound target itself
    r = curl(st, f"{u}/api/x", *auth)
    assert json.loads(r.stdout)["auth"] == digest(f"Bearer {VALUE}")
    no_value_anywhere(st, r.stdout)


def test_host_sni_mismatch_refused(swap_stack, forge):
    st = swap_stack()
    r = curl(st, f"https://allowed.test:{forge.port}/", "-H", f"Host: other.test:{forge.port}",
             "-H", f"Authorization: Bearer {PLACEHOLDER}")
    assert "421" in r.stdout or "is not the connection's host" in r.stdout, (r.stdout, r.stderr)
    assert forge.seen.requests == []
    r = curl(st, f"https://allowed.test:{forge.port}/", "-H", f"Authorization: Bearer {PLACEHOLDER}")
    assert json.loads(r.stdout)["host"] == f"allowed.test:{forge.port}"


def test_plain_http_gets_no_swap(swap_stack, forge, http_origin, make_stack):
    st = swap_stack(allow=[f"allowed.test:{http_origin.port}"])
    url = f"http://allowed.test:{http_origin.port}/plain"
    r = curl(st, url, "-H", f"Authorization: Bearer {PLACEHOLDER}", "-i")
    assert "403" in r.stdout and "plain HTTP" in r.stdout, r.stdout
    assert http_origin.requests == []
    r = curl(st, url, "-H", "Authorization: Bearer other")   # control
    assert "path=/plain" in r.stdout
    assert all(VALUE.encode() not in q for q in http_origin.requests)


def test_plain_http_body_with_the_placeholder_refused_by_the_proxy(swap_stack, forge, http_origin):
    """Through the proxy (absolute-form), the body read with the head is searched before
    anything is dialled; the part read later is searched as it is relayed (the
    transparent case in tests/e2e/test_tls_swap.py)."""
    st = swap_stack(allow=[f"allowed.test:{http_origin.port}"])
    url = f"http://allowed.test:{http_origin.port}/up"
    r = curl(st, url, "--data-binary", f"token={PLACEHOLDER}&a=1", "-i")
    assert "403" in r.stdout and "plain HTTP: attempted disclosure" in r.stdout and "in the body" in r.stdout, r.stdout
    assert http_origin.requests == [] and http_origin.accepted == 0
    assert any(e.get("disclosure") and e.get("where") == "the body" for e in st.events), st.events
    r = curl(st, url, "--data-binary", "token=something-else&a=1")     # control
    assert "path=/up" in r.stdout, (r.stdout, r.stderr)
    no_value_anywhere(st, r.stdout)


def test_origin_that_does_not_verify_refused(swap_stack, forge):
    st = swap_stack(upstream_ca=False)
    r = curl(st, f"https://allowed.test:{forge.port}/", "-H", f"Authorization: Bearer {PLACEHOLDER}")
    assert "502" in r.stdout or "did not verify" in r.stdout, (r.stdout, r.stderr)
    assert "did not verify" in r.stdout
    assert forge.seen.requests == []
    assert any("did not verify" in str(e.get("reason")) for e in st.wait_connects(1))


def test_agent_without_the_run_ca_cannot_be_served(swap_stack, forge):
    """The leaf is the run CA's: a client that does not trust it refuses (no silent MITM of
    clients that were not given the bundle), and nothing reaches the origin."""
    st = swap_stack()
    r = subprocess.run(["curl", "-sS", "--max-time", "10", "--proxy", f"http://127.0.0.1:{st.gw.port}",
                        "--cacert", str(forge.ca_file), f"https://allowed.test:{forge.port}/"],
                       capture_output=True, text=True, timeout=20, env=CLEAN_ENV)
    assert r.returncode != 0
    assert forge.seen.requests == []


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_push_over_https_with_token_as_basic_password(make_stack, tmp_path):
    bare = tmp_path / "srv" / "repo.git"
    bare.parent.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "config", "http.receivepack", "true"], check=True)
    f = Forge(tmp_path, git_root=str(bare.parent))
    try:
        st = make_stack([f"allowed.test:{f.port}"], allowed_ips=["127.0.0.1"])
        ca = RunCA()
        bundle = tmp_path / "bundle.pem"
        write_bundle(ca, str(bundle))
        st.gw.credentials = Swap((binding(f.port),), ca, upstream_ca=[str(f.ca_file)], emit=st._log)
        work = tmp_path / "work"
        env = {**CLEAN_ENV, "HOME": str(tmp_path), "GIT_SSL_CAINFO": str(bundle),
               "HTTPS_PROXY": f"http://127.0.0.1:{st.gw.port}", "GIT_TERMINAL_PROMPT": "0",
               "GIT_CONFIG_NOSYSTEM": "1", "FORGE_TOKEN": PLACEHOLDER}
        helper = "!f() { echo username=agent; echo password=$FORGE_TOKEN; }; f"
        git = ["git", "-c", f"credential.helper={helper}", "-c", "user.name=a", "-c", "user.email=a@b"]
        subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=env)
        (work / "f.txt").write_text("hello\n")
        subprocess.run([*git, "-C", str(work), "add", "."], check=True, env=env)
        subprocess.run([*git, "-C", str(work), "commit", "-qm", "one"], check=True, env=env)
        r = subprocess.run([*git, "-C", str(work), "push", f"https://allowed.test:{f.port}/repo.git", "main"],
                           capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        head = subprocess.run(["git", "-C", str(bare), "rev-parse", "main"], capture_output=True, text=True)
        assert head.stdout.strip() == subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"],
                                                     capture_output=True, text=True).stdout.strip()
        assert any(q["auth"] and VALUE in base64.b64decode(q["auth"][6:]).decode() for q in f.seen.requests)
        # control: the same push without the swap is refused by the forge (the placeholder is no password)
        st.gw.credentials = None
        env2 = {**env, "GIT_SSL_CAINFO": str(f.ca_file)}
        (work / "g.txt").write_text("more\n")
        subprocess.run([*git, "-C", str(work), "add", "."], check=True, env=env)
        subprocess.run([*git, "-C", str(work), "commit", "-qm", "two"], check=True, env=env)
        r = subprocess.run([*git, "-C", str(work), "push", f"https://allowed.test:{f.port}/repo.git", "main"],
                           capture_output=True, text=True, env=env2, timeout=60)
        assert r.returncode != 0
        for p in work.rglob("*"):
            if p.is_file():
                assert VALUE.encode() not in p.read_bytes(), p
        no_value_anywhere(st, r.stderr)
    finally:
        f.close()


def test_refused_request_ends_the_connection_value_never_sent(swap_stack, forge):
    """A keep-alive connection: the first request is swapped, the second (the placeholder in
    the URL) is refused and the connection ends; the origin saw only the first. (A refusal
    ends the connection at once: a response still in flight for an earlier, pipelined
    request is lost.)"""
    st = swap_stack()
    ctx = ssl.create_default_context(cafile=str(st.bundle))
    s = socket.create_connection(("127.0.0.1", st.gw.port), timeout=10)
    t = f"allowed.test:{forge.port}"
    s.sendall(f"CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n".encode())
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    tls = ctx.wrap_socket(s, server_hostname="allowed.test")
    assert tls.selected_alpn_protocol() in (None, "http/1.1")
    tls.sendall(f"GET /one HTTP/1.1\r\nHost: {t}\r\nAuthorization: token {PLACEHOLDER}\r\n\r\n".encode())
    out = b""
    while b"}" not in out:
        out += tls.recv(65536)
    tls.sendall(f"GET /two?{PLACEHOLDER} HTTP/1.1\r\nHost: {t}\r\n\r\n".encode())
    while True:
        try:
            d = tls.recv(65536)
        except (ssl.SSLError, OSError):
            break
        if not d:
            break
        out += d
    assert b"HTTP/1.1 200" in out and b"HTTP/1.1 403" in out
    assert [q["path"] for q in forge.seen.requests] == ["/one"]
    assert forge.seen.requests[0]["auth"] == f"token {VALUE}"


# --- the wiring (runtime/egress.py) -----------------------------------------------------------------
def test_egress_swaps_only_with_bindings_and_points_the_agent_at_the_bundle(tmp_path, forge):
    from confine.plan import HostFacts, compile
    from confine.plan.identity import Identity
    from confine.policy import load as _load
    from confine.runtime import egress
    from confine.runtime.events import Events

    wd, home, tmp = (tmp_path / n for n in ("wd", "home", "tmp"))
    for d in (wd, home, tmp):
        d.mkdir()
    prof = tmp_path / "p.yaml"
    prof.write_text("network:\n  allow: [allowed.test]\n")
    pol = _load.load(str(prof), workdir=str(wd), home=str(home), tmp=str(tmp))
    # network.upstream_ca: [forge CA] (the profile key is wt-creds' policy/credentials.py)
    pol = dataclasses.replace(pol, network=dataclasses.replace(pol.network, upstream_ca=(str(forge.ca_file),)))
    facts = HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True, namespaces=True,
                      apparmor=False, selinux=False)
    plan = compile(pol, ["true"], Identity(uid=1234, gid=1234, user="agent", home=str(home), switch=False,
                                           started_as_root=False), facts, parent_env={"PATH": "/usr/bin"})
    plain = egress.build(pol, Events())
    assert plain.swap is None and plain.gateway.credentials is None
    env = egress.bind_plan(plan, plain).env
    plain.in_tmp(str(tmp))
    assert not any(k in env for k in ("SSL_CERT_FILE", "GIT_SSL_CAINFO")) and not (tmp / egress.BUNDLE).exists()

    eg = egress.build(pol, Events(), credentials=(binding(443, targets=(Target("allowed.test"),)),))
    assert eg.gateway.credentials is eg.swap and eg.swap is not None
    env = egress.bind_plan(plan, eg).env
    bundle = tmp / egress.BUNDLE
    assert not bundle.exists()      # written once the TMPDIR is the agent's (a tmpfs may be mounted on it)
    eg.in_tmp(str(tmp))
    for v in ("SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"):
        assert env[v] == str(bundle)
    text = bundle.read_bytes()
    assert text.endswith(eg.swap.ca.pem) and len(text) > len(eg.swap.ca.pem)   # system roots first
    assert b"PRIVATE KEY" not in text and os.stat(bundle).st_mode & 0o222 == 0
    # the upstream trust holds the profile's CA: the forge verifies
    with socket.create_connection(("127.0.0.1", forge.port), timeout=5) as s, \
            eg.swap.upstream.wrap_socket(s, server_hostname="allowed.test") as t:
        assert t.version()


def test_each_use_is_put_to_the_judge(swap_stack, forge):
    """decision ask: the per-use judge (credentials/use.py's Judge.decide_use on the run)
    is called once per request that would carry the value, with host, method, path and the
    client's process; its no refuses that request, its yes swaps; without a judge, ask
    refuses (nobody to ask)."""
    calls, answers = [], [True, False]

    def judge(b, host, method, path, process=None, *, port=None):
        calls.append((b.name, host, method, path, port))
        return answers.pop(0)

    st = swap_stack(binding(forge.port, decision="ask"))
    u = f"https://allowed.test:{forge.port}"
    r = curl(st, f"{u}/one", "-H", f"Authorization: Bearer {PLACEHOLDER}")
    assert "nobody to ask" in r.stdout and forge.seen.requests == []
    st.swap.decide = judge
    r = curl(st, f"{u}/two?q=1", "-H", f"Authorization: Bearer {PLACEHOLDER}")
    assert json.loads(r.stdout)["auth"] == digest(f"Bearer {VALUE}")
    r = curl(st, f"{u}/three", "-H", f"Authorization: Bearer {PLACEHOLDER}")
    assert "not allowed" in r.stdout
    assert calls == [("FORGE_TOKEN", "allowed.test", "GET", "/two?q=1", forge.port),
                     ("FORGE_TOKEN", "allowed.test", "GET", "/three", forge.port)]
    assert [q["path"] for q in forge.seen.requests] == ["/two?q=1"]
    # toward a target the binding does not name, the judge is never asked
    r = curl(st, f"https://other.test:{forge.port}/", "-H", f"Authorization: Bearer {PLACEHOLDER}")
    assert "attempted disclosure" in r.stdout and len(calls) == 2


def test_a_value_the_origin_echoes_never_reaches_the_agent(swap_stack, forge):
    """An origin that sends the Authorization header back (a debugging endpoint): the agent
    gets the placeholder where it has the value's length, else the connection is cut;
    the origin itself did get the value (the control)."""
    same = "confine-ph-0123456789abc"
    assert len(same) == len(VALUE)
    st = swap_stack(Binding(name="FORGE_TOKEN", placeholder=same, value=VALUE,
                            targets=(Target("allowed.test", forge.port),)))
    r = curl(st, f"https://allowed.test:{forge.port}/echo", "-H", f"Authorization: Bearer {same}")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert VALUE not in r.stdout and f"Bearer {same}" in got["echo"]
    assert forge.seen.requests[-1]["auth"] == f"Bearer {VALUE}"
    # a placeholder of another length: the response is cut, the value not delivered
    st2 = swap_stack()
    r = curl(st2, f"https://allowed.test:{forge.port}/echo", "-H", f"Authorization: Bearer {PLACEHOLDER}")
    assert r.returncode != 0 and VALUE not in r.stdout
    assert forge.seen.requests[-1]["auth"] == f"Bearer {VALUE}"
    assert any("sent the value of FORGE_TOKEN back" in str(e.get("reason")) for e in st2.wait_connects(1))
    no_value_anywhere(st2, r.stdout, r.stderr)


def test_redirected_connection_is_swapped_too(swap_stack, forge):
    """A tool that ignores the proxy variables connects directly; the supervisor redirects
    it (the transparent entry): its TLS is terminated and swapped the same way, and the
    placeholder toward another allowed host is refused there too."""
    st = swap_stack()
    ctx = ssl.create_default_context(cafile=str(st.bundle))

    def direct(name, auth):
        st.resolver.resolve(name)          # what confine's DNS answered the tool
        c = socket.socket()
        c.bind(("127.0.0.1", 0))
        assert st.gw.expect(c.getsockname(), "127.0.0.1", forge.port, pid=77)
        c.settimeout(10)
        c.connect(("127.0.0.1", st.gw.redirect_port))
        with ctx.wrap_socket(c, server_hostname=name) as t:
            t.sendall(f"GET /d HTTP/1.1\r\nHost: {name}:{forge.port}\r\nAuthorization: Bearer {auth}\r\n"
                      "Connection: close\r\n\r\n".encode())
            out = b""
            while True:
                try:
                    d = t.recv(65536)
                except (ssl.SSLError, OSError):
                    break
                if not d:
                    break
                out += d
        return out.decode()
    assert json.loads(direct("allowed.test", PLACEHOLDER).split("\r\n\r\n", 1)[1])["auth"] == digest(f"Bearer {VALUE}")
    assert "attempted disclosure" in direct("other.test", PLACEHOLDER)
    assert [(q["host"], q["auth"]) for q in forge.seen.requests] == [(f"allowed.test:{forge.port}", f"Bearer {VALUE}")]
    assert any(e.get("terminated") and e["mode"] == "transparent" for e in st.wait_connects(2))

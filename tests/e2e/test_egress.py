"""The egress gateway wired into `confine exec` (issue 14): real confined processes,
started as root and as the unprivileged test account, inside network namespaces
this module creates. Nothing is sent outside the machine:

    [netns A: confine and the agent] --veth 10.200.0.1/30 <-> 10.200.0.2/30-- [netns B]
    B's lo holds 1.1.1.1, 169.254.169.254, 10.9.9.9 and 10.53.0.53 (the DNS upstream);
    A's only route is the veth to B; /etc/netns/A/resolv.conf names 10.53.0.53.

So a direct connection from A to 1.1.1.1 really has somewhere to go (the
control, unconfined in A, gets there), and a refusal inside is confine's.
The servers (egress_servers.py) write every DNS query, accept, datagram and
request to a log the tests read: "the upstream sees nothing" is checked there.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile

import pytest
from conftest import PY, Sandbox, make_workdir, write_owned

pytestmark = pytest.mark.skipif(shutil.which("ip") is None or shutil.which("openssl") is None,
                                reason="needs iproute2 (ip netns) and openssl")

HERE = os.path.dirname(os.path.abspath(__file__))
TAG = f"{os.getpid() % 100000}"
NS_A, NS_B = f"cfgwA{TAG}", f"cfgwB{TAG}"


def _sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, timeout=30)


def _wheel(d: str) -> str:
    name = "confinetestpkg-1.0-py3-none-any.whl"
    files = {"confinetestpkg/__init__.py": "X = 1\n",
             "confinetestpkg-1.0.dist-info/METADATA":
                 "Metadata-Version: 2.1\nName: confinetestpkg\nVersion: 1.0\n",
             "confinetestpkg-1.0.dist-info/WHEEL":
                 "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rec = "".join(f"{k},,\n" for k in files) + "confinetestpkg-1.0.dist-info/RECORD,,\n"
    files["confinetestpkg-1.0.dist-info/RECORD"] = rec
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return path


def _advert(d: str) -> str:
    """The smart-HTTP ref advertisement of a one-commit repository (protocol v0)."""
    repo = os.path.join(d, "src")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": d}
    subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True, env=env, timeout=30)
    subprocess.run(["git", "-C", repo, "commit", "-q", "--allow-empty", "-m", "x"], check=True,
                   env=env, timeout=30)
    refs = subprocess.run(["git", "upload-pack", "--advertise-refs", "--stateless-rpc", repo],
                          check=True, capture_output=True, env=env, timeout=30).stdout
    head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True, env=env, timeout=30).stdout.strip()
    svc = b"# service=git-upload-pack\n"
    path = os.path.join(d, "advert")
    with open(path, "wb") as f:
        f.write(b"%04x" % (len(svc) + 4) + svc + b"0000" + refs)
    with open(os.path.join(d, "head"), "w") as f:
        f.write(head)
    return path


class Net:
    def __init__(self, d: str, log: str, ca: str, head: str):
        self.d, self.log, self.ca, self.head = d, log, ca, head

    def events(self) -> list[dict]:
        with open(self.log) as f:
            return [json.loads(line) for line in f if line.strip()]

    def mark(self) -> int:
        return len(self.events())

    def since(self, mark: int) -> list[dict]:
        return self.events()[mark:]


@pytest.fixture(scope="module")
def net():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    d = tempfile.mkdtemp(prefix="confine-egress-")
    os.chmod(d, 0o755)
    made: list[str] = []
    server = None
    etc = f"/etc/netns/{NS_A}"
    try:
        for ns in (NS_A, NS_B):
            _sh("ip", "netns", "add", ns)
            made.append(ns)
        _sh("ip", "-n", NS_A, "link", "add", "vA", "type", "veth", "peer", "name", "vB",
            "netns", NS_B)
        for ns, dev, addr in ((NS_A, "vA", "10.200.0.1/30"), (NS_B, "vB", "10.200.0.2/30")):
            _sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh("ip", "-n", NS_A, "route", "add", "default", "via", "10.200.0.2")
        for a in ("1.1.1.1/32", "169.254.169.254/32", "10.9.9.9/32", "10.53.0.53/32"):
            _sh("ip", "-n", NS_B, "addr", "add", a, "dev", "lo")
        os.makedirs(etc, exist_ok=True)
        with open(f"{etc}/resolv.conf", "w") as f:
            f.write("nameserver 10.53.0.53\n")
        cert, key = os.path.join(d, "ca.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=allowed.test", "-addext",
                        "subjectAltName=DNS:allowed.test,DNS:other.test,DNS:private.test,"
                        "DNS:meta.test"], check=True, capture_output=True, timeout=30)
        os.chmod(cert, 0o644)
        advert, wheel = _advert(d), _wheel(d)
        log, ready = os.path.join(d, "events.jsonl"), os.path.join(d, "ready")
        open(log, "w").close()
        server = subprocess.Popen(["ip", "netns", "exec", NS_B, sys.executable,
                                   os.path.join(HERE, "egress_servers.py"), log, cert, key,
                                   advert, wheel, ready])
        for _ in range(200):
            if os.path.exists(ready):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the test servers did not start")
        with open(os.path.join(d, "head")) as f:
            head = f.read().strip()
        yield Net(d, log, cert, head)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        shutil.rmtree(etc, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def _ca(sb, net: Net) -> None:
    ca = os.path.join(sb.workdir, "ca.pem")
    if not os.path.exists(ca):
        with open(net.ca) as f:
            write_owned(ca, f.read(), sb.pw)


def inside(sb, net: Net, cmd: list[str], *opts: str, timeout: int = 60):
    """`confine exec` in namespace A (the agent's files: the CA in the workdir)."""
    _ca(sb, net)
    full = ["ip", "netns", "exec", NS_A] + sb.exec_cmd(cmd, *opts)
    return subprocess.run(full, capture_output=True, text=True, timeout=timeout, cwd=sb.workdir)


def outside(sb, net: Net, cmd: list[str], timeout: int = 60):
    """The same command as the agent's identity in namespace A, unconfined: the control."""
    _ca(sb, net)
    full = ["ip", "netns", "exec", NS_A] + sb.outside_cmd(cmd)
    return subprocess.run(full, capture_output=True, text=True, timeout=timeout, cwd=sb.workdir)


def py(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


def last_json(out: str) -> dict:
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in {out!r}")


def confine_lines(stderr: str) -> list[str]:
    # the agent writes to the same stderr at the same moment (curl's own error line
    # may be split around ours): find ours wherever a line holds it
    return [ln[ln.index("confine: egress:"):] for ln in stderr.splitlines()
            if "confine: egress:" in ln]


ALLOW = ("--allow-host", "allowed.test")

# Each attempt reports "ok" plus what it read, or the errno name / exception.
ATTEMPTS = r'''
import errno, json, socket, ssl, sys, urllib.request
R = {}
ctx = ssl.create_default_context(cafile="ca.pem")
def run(name, fn):
    try:
        R[name] = fn()
    except OSError as e:
        R[name] = errno.errorcode.get(e.errno, "exc:%s" % e) if e.errno else "exc:%s:%s" % (type(e).__name__, e)
    except Exception as e:
        R[name] = "exc:%s:%s" % (type(e).__name__, e)
def tls(host, port=443, sni=None):
    s = socket.create_connection((host, port), timeout=10)
    t = ctx.wrap_socket(s, server_hostname=sni or host)
    t.sendall(b"GET / HTTP/1.1\r\nHost: " + (sni or host).encode() + b"\r\n\r\n")
    out = b""
    while True:
        d = t.recv(65536)
        if not d:
            break
        out += d
    return out.decode().split("\r\n\r\n", 1)[-1].strip()
def plain(ip, port):
    s = socket.create_connection((ip, port), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    s.settimeout(5)
    return "read:%r" % s.recv(100)
def udp(ip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", (ip, port))
    return "sent"
def resolve(name):
    return sorted({a[4][0] for a in socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)})
def urllib_get(url):
    return urllib.request.urlopen(url, context=ctx, timeout=10).read().decode().strip()
'''


@pytest.mark.parametrize("mode", ["root", "user"])
def test_allowed_name_by_proxy_and_by_direct_connect(mode, net, test_user, confine_bin, tmp_path):
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    # outside every path the agent can write (confine refuses a --log it could forge)
    logdir = tempfile.mkdtemp(prefix="confine-egress-log-")
    os.chown(logdir, sb.pw.pw_uid, sb.pw.pw_gid)
    logf = os.path.join(logdir, "decisions.jsonl")
    try:
        m = net.mark()
        p = inside(sb, net, ["curl", "-sS", "--cacert", "ca.pem", "https://allowed.test/"],
                   *ALLOW, "--log", logf)
        assert p.returncode == 0, p.stderr
        assert "hello from allowed.test sni=allowed.test" in p.stdout
        p = inside(sb, net, py(ATTEMPTS + r'''
run("resolve", lambda: resolve("allowed.test"))
run("direct_tls", lambda: tls("allowed.test"))
run("urllib", lambda: urllib_get("https://allowed.test/"))
print(json.dumps(R))
'''), *ALLOW)
        r = last_json(p.stdout)
        assert r["resolve"] == ["1.1.1.1"], p.stderr
        assert r["direct_tls"] == "hello from allowed.test sni=allowed.test", p.stderr
        assert r["urllib"] == "hello from allowed.test sni=allowed.test", p.stderr
        got = net.since(m)
        assert [e["sni"] for e in got if e["ev"] == "request"] == ["allowed.test"] * 3
        # the origin saw the gateway (A's veth address), never the agent's own socket
        assert {e["peer"] for e in got if e["ev"] == "accept"} == {"10.200.0.1"}
        with open(logf) as f:
            evs = [json.loads(line) for line in f]
        conn = [e for e in evs if e.get("event") == "connect"]
        assert conn and conn[0]["decision"] == "allow" and conn[0]["host"] == "allowed.test"
        for k in ("time", "mode", "client", "host", "port", "resolved", "dialled", "sni",
                  "decision", "rule", "bytes_up", "bytes_down", "duration_ms"):
            assert k in conn[0], (k, conn[0])
        assert conn[0]["dialled"] == "1.1.1.1:443" and conn[0]["bytes_down"] > 0
        p = inside(sb, net, py(ATTEMPTS + 'run("t", lambda: tls("allowed.test"))\n'
                                          'run("u", lambda: udp("1.1.1.1", 9999))\n'
                                          'print(json.dumps(R))'), *ALLOW, "--log", logf)
        assert last_json(p.stdout)["t"].startswith("hello"), p.stderr
        with open(logf) as f:
            evs = [json.loads(line) for line in f]
        redirected = [e for e in evs if e.get("mode") == "transparent"][-1]
        assert redirected["decision"] == "allow" and redirected["sni"] == "allowed.test"
        assert isinstance(redirected["pid"], int), redirected
        assert os.path.basename(redirected["exe"]).startswith("python3"), redirected
        udp = [e for e in evs if e.get("mode") == "udp"][-1]
        assert udp["decision"] == "deny" and udp["host"] == "1.1.1.1" and udp["port"] == 9999
        assert udp["exe"] and udp["layer"] == "mediation", udp
        dns = [e for e in evs if e.get("event") == "dns"]
        assert dns and all(k in dns[0] for k in ("name", "qtype", "decision", "rule", "rcode",
                                                  "answers", "upstream", "client", "proto"))
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)
        shutil.rmtree(logdir, ignore_errors=True)


@pytest.mark.parametrize("mode", ["root", "user"])
def test_refused_destinations(mode, net, test_user, confine_bin):
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    body = ATTEMPTS + r'''
run("direct_ip", lambda: plain("1.1.1.1", 8443))
run("udp", lambda: udp("1.1.1.1", 9999))
run("metadata", lambda: plain("169.254.169.254", 80))
run("exfil_dns", lambda: resolve("secret-data.exfil.test"))
run("private", lambda: tls("private.test"))
run("sni_mismatch", lambda: tls("allowed.test", sni="other.test"))
R["interfaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
print(json.dumps(R))
'''
    try:
        # the control: unconfined in the same namespace, every one of these gets there
        m = net.mark()
        c = last_json(outside(sb, net, py(body)).stdout)
        assert c["direct_ip"].startswith("exc:") or c["direct_ip"] == "ECONNRESET" \
            or c["direct_ip"].startswith("read:"), c
        assert c["udp"] == "sent" and c["exfil_dns"] == ["1.1.1.1"], c
        assert c["interfaces"] == ["lo", "vA"], c
        seen = net.since(m)
        assert {"1.1.1.1:8443", "169.254.169.254:80"} <= {e["dst"] for e in seen
                                                           if e["ev"] == "accept"}
        assert any(e["ev"] == "udp" for e in seen)
        assert any(e["ev"] == "dns" and e["name"] == "secret-data.exfil.test" for e in seen)

        m = net.mark()
        p = inside(sb, net, py(body), *ALLOW, "--allow-host", "private.test")
        r = last_json(p.stdout)
        assert r["direct_ip"] == "ECONNREFUSED", (r, p.stderr)
        # its own network namespace: no route anywhere but through the gateway's sockets
        assert r["interfaces"] == ["lo"], r
        assert r["udp"] == "EACCES", r
        assert r["metadata"] == "ECONNREFUSED", r
        assert "Name or service not known" in r["exfil_dns"], r      # NXDOMAIN
        assert "hello" not in r["private"], r
        assert "hello" not in r["sni_mismatch"], r     # closed before anything is dialled
        seen = net.since(m)
        assert [e for e in seen if e["ev"] in ("accept", "udp")] == [], seen
        # only allowed names were ever asked upstream: the query name carries nothing out
        assert {e["name"] for e in seen if e["ev"] == "dns"} <= {"private.test", "allowed.test"}
        lines = confine_lines(p.stderr)
        assert any("1.1.1.1:8443" in ln for ln in lines), p.stderr
        assert any("UDP to 1.1.1.1:9999" in ln for ln in lines), p.stderr
        assert any("secret-data.exfil.test" in ln and "--allow-host secret-data.exfil.test" in ln
                   for ln in lines), p.stderr
        assert any("private.test" in ln and "10.9.9.9" in ln for ln in lines), p.stderr
        assert any("other.test" in ln for ln in lines), p.stderr
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


@pytest.mark.parametrize("mode", ["root", "user"])
def test_name_not_allowed_is_refused_at_once_naming_the_key(mode, net, test_user, confine_bin):
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    try:
        m = net.mark()
        p = inside(sb, net, ["curl", "-sS", "--cacert", "ca.pem", "https://other.test/"], *ALLOW)
        assert p.returncode != 0 and "403" in p.stderr, p.stderr
        lines = confine_lines(p.stderr)
        assert len(lines) == 1, p.stderr
        assert "other.test" in lines[0] and "network.allow: [other.test]" in lines[0] \
            and "--allow-host other.test" in lines[0]
        assert net.since(m) == []          # not resolved, not dialled
        # the control: allowed by the flag it names
        p = inside(sb, net, ["curl", "-sS", "--cacert", "ca.pem", "https://other.test/"],
                   "--allow-host", "other.test")
        assert p.returncode == 0 and "sni=other.test" in p.stdout, p.stderr
        # metadata by name: allowed by a rule, still refused (and never dialled)
        m = net.mark()
        p = inside(sb, net, ["curl", "-sS", "--cacert", "ca.pem", "https://meta.test/"],
                   "--allow-host", "meta.test")
        assert p.returncode != 0 and "169.254.169.254" in p.stderr, p.stderr
        assert [e for e in net.since(m) if e["ev"] == "accept"] == []
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


@pytest.mark.parametrize("mode", ["root", "user"])
def test_git_and_pip_through_the_gateway(mode, net, test_user, confine_bin):
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    try:
        p = inside(sb, net, ["git", "-c", "protocol.version=0", "-c", "http.sslCAInfo=ca.pem",
                             "ls-remote", "https://allowed.test/repo.git"], *ALLOW)
        assert p.returncode == 0 and net.head in p.stdout, p.stderr
        p = inside(sb, net, [PY, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                             "--disable-pip-version-check", "--cert", "ca.pem",
                             "--index-url", "https://allowed.test/simple/", "-d", "dl",
                             "confinetestpkg"], *ALLOW, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        assert os.listdir(os.path.join(sb.workdir, "dl")) == [
            "confinetestpkg-1.0-py3-none-any.whl"]
        # the control: the same git without the host allowed is refused by name
        p = inside(sb, net, ["git", "-c", "protocol.version=0", "-c", "http.sslCAInfo=ca.pem",
                             "ls-remote", "https://allowed.test/repo.git"],
                   "--allow-host", "other.test")
        assert p.returncode != 0 and any("allowed.test" in ln for ln in confine_lines(p.stderr))
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


@pytest.mark.parametrize("mode", ["root", "user"])
def test_without_namespaces_the_supervisor_and_landlock_still_decide(mode, net, test_user,
                                                                     confine_bin):
    """Landlock, seccomp and the mediation alone (no mount, pid or network namespace of
    confine's): the same refusals, the same allowed name."""
    sb = Sandbox(mode, test_user, make_workdir(test_user)).without_namespaces()
    try:
        m = net.mark()
        p = inside(sb, net, py(ATTEMPTS + r'''
run("direct_tls", lambda: tls("allowed.test"))
run("direct_ip", lambda: plain("1.1.1.1", 8443))
run("udp", lambda: udp("1.1.1.1", 9999))
print(json.dumps(R))
'''), *ALLOW)
        r = last_json(p.stdout)
        assert r == {"direct_tls": "hello from allowed.test sni=allowed.test",
                     "direct_ip": "ECONNREFUSED", "udp": "EACCES"}, p.stderr
        assert {e["dst"] for e in net.since(m) if e["ev"] in ("accept", "udp")} == {"1.1.1.1:443"}
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


@pytest.mark.parametrize("mode", ["root", "user"])
def test_below_landlock_abi_4_the_gateway_routes_every_connect(mode, net, test_user, confine_bin):
    """ABI 3 has no Landlock TCP rights. With the gateway and a network namespace of
    its own the supervisor routes every connect, so the run needs no flag: a name
    the profile allows works through the redirect, a direct address is refused, and
    the origin sees only the gateway's connection. A profile with host ports (no
    namespace of its own) stays refused by name."""
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    sb.env = ["CONFINE_TEST_LANDLOCK_ABI_MAX=3"]
    try:
        d = json.loads(inside(sb, net, ["true"], *ALLOW, "--dry-run", "--json").stdout)
        assert d["missing"] == [], d["missing"]
        assert d["mechanisms"]["landlock.net_tcp"].startswith("mediated connects"), d
        m = net.mark()
        p = inside(sb, net, py(ATTEMPTS + r'''
run("direct_tls", lambda: tls("allowed.test"))
run("direct_ip", lambda: plain("1.1.1.1", 8443))
run("direct_private", lambda: plain("10.9.9.9", 80))
print(json.dumps(R))
'''), *ALLOW)
        assert last_json(p.stdout) == {"direct_tls": "hello from allowed.test sni=allowed.test",
                                       "direct_ip": "ECONNREFUSED",
                                       "direct_private": "ECONNREFUSED"}, p.stderr
        assert "NOT enforced" not in p.stderr and "degraded" not in p.stderr, p.stderr
        assert {e["dst"] for e in net.since(m) if e["ev"] == "accept"} == {"1.1.1.1:443"}
        prof = os.path.join(sb.workdir, "ports.yaml")
        with open(prof, "w") as f:
            f.write("extends: default\nnetwork:\n  connect_tcp: [8080]\n")
        os.chmod(prof, 0o644)
        p = inside(sb, net, ["true"], "-p", prof)
        assert p.returncode == 125 and "landlock.net_tcp" in p.stderr, p.stderr
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


@pytest.mark.parametrize("mode", ["root", "user"])
def test_gateway_ends_with_the_run_whatever_the_agent_leaves(mode, net, test_user, confine_bin):
    """A leftover holding a tunnel open and many stalled clients: the run still ends
    when the agent does, and the gateway's port is closed after it."""
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    hold = textwrap.dedent(r'''
        import os, socket, time
        host, port = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1].split(":")
        keep = []
        for _ in range(60):        # stalled: connected, never a byte
            keep.append(socket.create_connection((host, int(port))))
        s = socket.create_connection((host, int(port)))
        s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
        s.recv(100)
        keep.append(s)
        print("held", flush=True)
        time.sleep(300)
    ''')
    agent = (f"{PY} -c '{hold}' > held.txt & "
             "while ! grep -q held held.txt 2>/dev/null; do sleep 0.05; done; "
             "curl -sS --cacert ca.pem https://allowed.test/ && echo PROXY=$HTTPS_PROXY")
    try:
        p = inside(sb, net, ["sh", "-c", agent], *ALLOW, timeout=60)
        assert p.returncode == 0 and "sni=allowed.test" in p.stdout, p.stderr
        url = [ln for ln in p.stdout.splitlines() if ln.startswith("PROXY=")][0]
        port = int(url.rsplit(":", 1)[1])
        probe = textwrap.dedent(f'''
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=5)
                print("open")
            except ConnectionRefusedError:
                print("refused")
        ''')
        assert outside(sb, net, py(probe)).stdout.strip() == "refused"
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


def test_a_stopped_gateway_refuses():
    """Fail closed: once stopped, its ports refuse (nothing relays, nothing opens)."""
    import socket

    from confine.policy.model import Network, Policy
    from confine.runtime.egress import start
    from confine.runtime.events import Events
    pol = Policy(name="t", description="", sources=(), workdir="/", home="/", tmp="/",
                 network=Network(allow=("allowed.test",)))
    eg = start(pol, Events())
    ports = [eg.gateway.port, eg.gateway.redirect_port, eg.dns.port]
    with socket.create_connection(("127.0.0.1", ports[0]), timeout=5):
        pass                                   # the control: it was listening
    eg.stop()
    for port in ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)


DNS_TCP = r'''
import json, socket, struct, sys
def q(name, server):
    body = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    body += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    body += struct.pack("!HH", 1, 1)
    s = socket.create_connection((server, 53), timeout=10)
    s.sendall(struct.pack("!H", len(body)) + body)
    n = struct.unpack("!H", s.recv(2))[0]
    data = b""
    while len(data) < n:
        data += s.recv(n - len(data))
    rcode, an = data[3] & 15, struct.unpack_from("!H", data, 6)[0]
    return [rcode, socket.inet_ntoa(data[-4:]) if an else None]
R = {}
for name, server in json.loads(sys.argv[1]):
    try:
        R[name + "@" + server] = q(name, server)
    except OSError as e:
        R[name + "@" + server] = str(e)
print(json.dumps(R))
'''


@pytest.mark.parametrize("mode", ["root", "user"])
def test_dns_over_tcp_to_any_address_is_answered_by_confine(mode, net, test_user, confine_bin):
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    try:
        m = net.mark()
        asks = [["allowed.test", "10.53.0.53"], ["secret-tcp.exfil.test", "10.53.0.53"]]
        c = last_json(outside(sb, net, py(DNS_TCP) + [json.dumps(asks)]).stdout)
        assert c["secret-tcp.exfil.test@10.53.0.53"] == [3, None]     # the upstream answers
        assert any(e.get("name") == "secret-tcp.exfil.test" for e in net.since(m))
        m = net.mark()
        # 192.0.2.99: no server at all (TEST-NET-1; A routes it to B, which drops it)
        p = inside(sb, net, py(DNS_TCP) + [json.dumps(asks + [["allowed.test", "192.0.2.99"]])],
                   *ALLOW)
        r = last_json(p.stdout)
        assert r["allowed.test@10.53.0.53"] == [0, "1.1.1.1"], p.stderr
        assert r["allowed.test@192.0.2.99"] == [0, "1.1.1.1"], p.stderr   # any address
        assert r["secret-tcp.exfil.test@10.53.0.53"] == [3, None], p.stderr
        assert {e.get("name") for e in net.since(m)} <= {"allowed.test"}
        # glibc told to use TCP (the profiles' old RES_OPTIONS=use-vc) resolves too
        p = inside(sb, net, py("import socket; print(socket.gethostbyname('allowed.test'))"),
                   *ALLOW, "--env", "RES_OPTIONS=use-vc")
        assert p.stdout.strip() == "1.1.1.1", p.stderr
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


ODD = ATTEMPTS + r'''
import ctypes, struct
libc = ctypes.CDLL(None, use_errno=True)
def v6_mapped(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(("::ffff:1.1.1.1", port))
    return "connected"
def v6_tls():
    resolve("allowed.test")
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(("::ffff:1.1.1.1", 443))
    t = ctx.wrap_socket(s, server_hostname="allowed.test")
    t.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
    return t.recv(4096).decode().split("\r\n\r\n", 1)[-1].strip()
def raw_sendto(fam, ip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sa = struct.pack("<H", fam) + struct.pack("!H4s8x", port, socket.inet_aton(ip))
    ctypes.set_errno(0)
    r = libc.sendto(s.fileno(), b"x", 1, 0, sa, len(sa))
    return "sent" if r >= 0 else errno.errorcode[ctypes.get_errno()]
def udp_sendmsg(ip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendmsg([b"x"], [], 0, (ip, port))
    return "sent"
def dns_by_sendmsg():
    q = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x07allowed\x04test\x00" + struct.pack("!HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)         # outside, nothing answers there
    s.sendmsg([q], [], 0, ("192.0.2.99", 53))
    data, peer = s.recvfrom(4096)
    return [data[3] & 15, socket.inet_ntoa(data[-4:])]
class MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.c_void_p),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]
class MMsg(ctypes.Structure):
    _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint32)]
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
def mmsg(sock, addr):
    buf = ctypes.create_string_buffer(b"x")
    iov = IoVec(ctypes.cast(buf, ctypes.c_void_p), 1)
    vec = (MMsg * 2)()
    sa = None
    if addr:
        sa = ctypes.create_string_buffer(struct.pack("<H", socket.AF_INET)
                                         + struct.pack("!H4s8x", addr[1], socket.inet_aton(addr[0])), 16)
    for m in vec:
        m.hdr.iov = ctypes.cast(ctypes.pointer(iov), ctypes.c_void_p)
        m.hdr.iovlen = 1
        if sa is not None:
            m.hdr.name = ctypes.cast(sa, ctypes.c_void_p)
            m.hdr.namelen = 16
    ctypes.set_errno(0)
    r = libc.sendmmsg(sock.fileno(), vec, 2, 0)
    return [r, vec[0].len, vec[1].len] if r >= 0 else errno.errorcode[ctypes.get_errno()]
def mmsg_unix():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    return mmsg(a, None)
def mmsg_big():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("1.1.1.1", 53))
    big = ctypes.create_string_buffer(100000)
    iov = IoVec(ctypes.cast(big, ctypes.c_void_p), 100000)
    vec = (MMsg * 1)()
    vec[0].hdr.iov = ctypes.cast(ctypes.pointer(iov), ctypes.c_void_p)
    vec[0].hdr.iovlen = 1
    ctypes.set_errno(0)
    r = libc.sendmmsg(s.fileno(), vec, 1, 0)
    return r if r >= 0 else errno.errorcode[ctypes.get_errno()]
def mmsg_addr():
    return mmsg(socket.socket(socket.AF_INET, socket.SOCK_DGRAM), ("1.1.1.1", 9999))
def mmsg_connected_dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("1.1.1.1", 53))      # any resolver address: confine's server
    return mmsg(s, None)
def other_port_of_allowed():
    resolve("allowed.test")
    return plain("1.1.1.1", 8443)
def zero_addr():
    return plain("0.0.0.0", 8443)
def short_addr():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sa = struct.pack("<H", socket.AF_INET) + b"\x20\xfb\x01\x01"
    ctypes.set_errno(0)
    r = libc.connect(s.fileno(), sa, len(sa))
    return "connected" if r == 0 else errno.errorcode[ctypes.get_errno()]
def connect_sni(host, sni):
    """CONNECT host:443 through the proxy, then a ClientHello naming another host."""
    phost, pport = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1].split(":")
    s = socket.create_connection((phost, int(pport)), timeout=10)
    s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host, host)).encode())
    head = s.recv(4096)
    if b" 200 " not in head.split(b"\r\n")[0]:
        return "refused:%r" % head[:40]
    t = ctx.wrap_socket(s, server_hostname=sni)
    t.sendall(b"GET / HTTP/1.1\r\nHost: " + sni.encode() + b"\r\n\r\n")
    return t.recv(4096).decode()
import os
if "HTTPS_PROXY" in os.environ:
    run("tunnel_other_sni", lambda: connect_sni("allowed.test", "other.test"))
    run("tunnel_same_sni", lambda: connect_sni("allowed.test", "allowed.test").split("\r\n\r\n", 1)[-1].strip())
run("v6_mapped_direct", lambda: v6_mapped(8443))
run("v6_mapped_allowed", v6_tls)
run("unspec_sendto", lambda: raw_sendto(0, "1.1.1.1", 9999))
run("udp_sendmsg", lambda: udp_sendmsg("1.1.1.1", 9999))
run("dns_by_sendmsg", dns_by_sendmsg)
run("mmsg_addr", mmsg_addr)
run("mmsg_unix", mmsg_unix)
run("mmsg_big", mmsg_big)
run("mmsg_connected_dns", mmsg_connected_dns)
run("other_port_of_allowed", other_port_of_allowed)
run("zero_addr", zero_addr)
run("short_addr", short_addr)
print(json.dumps(R))
'''


@pytest.mark.parametrize("mode", ["root", "user"])
def test_odd_addresses_and_calls(mode, net, test_user, confine_bin):
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    try:
        m = net.mark()
        c = last_json(outside(sb, net, py(ODD)).stdout)
        # the control: unconfined, the datagrams and the direct connects get there
        assert c["unspec_sendto"] == "sent" and c["udp_sendmsg"] == "sent", c
        assert c["mmsg_addr"] == [2, 1, 1] and c["v6_mapped_direct"] == "connected", c
        assert {"1.1.1.1:8443", "1.1.1.1:9999"} <= {e.get("dst") for e in net.since(m)}
        m = net.mark()
        p = inside(sb, net, py(ODD), *ALLOW)
        r = last_json(p.stdout)
        assert r["v6_mapped_direct"] == "ECONNREFUSED", (r, p.stderr)
        assert r["v6_mapped_allowed"] == "hello from allowed.test sni=allowed.test", r
        assert r["unspec_sendto"] == "EACCES" and r["udp_sendmsg"] == "EACCES", r
        assert r["dns_by_sendmsg"] == [0, "1.1.1.1"], r        # answered by confine
        assert r["mmsg_addr"] == "EPERM", r
        assert c["mmsg_unix"] == [2, 1, 1] and r["mmsg_unix"] == "EPERM", (c, r)  # as before
        assert c["mmsg_big"] == "EMSGSIZE" and r["mmsg_big"] == "EMSGSIZE", (c, r)
        assert r["mmsg_connected_dns"] == [2, 1, 1], r          # performed, msg_len written
        assert r["other_port_of_allowed"] == "ECONNREFUSED", r  # pinned, but not on 8443
        assert r["zero_addr"] in ("ECONNREFUSED", "EACCES"), r  # the agent's own loopback
        assert r["short_addr"] == "EINVAL", r
        assert "hello" not in r["tunnel_other_sni"], r       # closed, nothing dialled
        assert r["tunnel_same_sni"] == "hello from allowed.test sni=allowed.test", r
        got = net.since(m)
        assert {e["dst"] for e in got if e["ev"] in ("accept", "udp")} == {"1.1.1.1:443"}, got
        assert {e["sni"] for e in got if e["ev"] == "request"} == {"allowed.test"}, got
        assert {e["name"] for e in got if e["ev"] == "dns"} <= {"allowed.test"}
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


@pytest.mark.parametrize("mode", ["root", "user"])
def test_python_requests_if_installed(mode, net, test_user, confine_bin):
    if subprocess.run([PY, "-c", "import requests"], capture_output=True).returncode != 0:
        pytest.skip("python3-requests is not installed for the system python")
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    try:
        code = "import requests; print(requests.get('https://allowed.test/', verify='ca.pem', timeout=10).text)"
        p = inside(sb, net, py(code), *ALLOW)
        assert "sni=allowed.test" in p.stdout, p.stderr
        p = inside(sb, net, py(code), "--allow-host", "other.test")
        assert p.returncode != 0 and any("allowed.test" in ln for ln in confine_lines(p.stderr))
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)


APPROVER = r'''
import json, sys
q = json.loads(sys.stdin.readline())
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(q) + "\n")
print(json.dumps({"decision": "run" if q.get("host") == "allowed.test" else "deny"}))
'''


@pytest.mark.parametrize("mode", ["root", "user"])
def test_ask_through_an_approver_allows_only_what_it_allows(mode, net, test_user, confine_bin):
    """network.default: ask with --approver: the approver is asked (once per host, it
    answers "run"), allowed.test is reached by curl through the proxy and by a direct
    connect; other.test is denied by the approver (a confine: line, nothing dialled);
    the control: the same profile without an approver on a run with no terminal
    denies allowed.test too (non-interactive)."""
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    d = tempfile.mkdtemp(prefix="confine-ask-")
    try:
        os.chmod(d, 0o755)
        prof = os.path.join(d, "ask.yaml")
        with open(prof, "w") as f:
            f.write("extends: default\nnetwork:\n  default: ask\n")
        script, asked = os.path.join(d, "approver.py"), os.path.join(d, "asked.jsonl")
        with open(script, "w") as f:
            f.write(APPROVER)
        open(asked, "w").close()
        os.chmod(asked, 0o666)
        for p in (prof, script):
            os.chmod(p, 0o644)
        approver = f"{sys.executable} {script} {asked}"
        sb.opts = ["-p", prof]
        p = inside(sb, net, ["sh", "-c",
                             "curl -sS --cacert ca.pem https://allowed.test/ && "
                             "curl -sS --cacert ca.pem https://allowed.test/again"],
                   "--approver", approver)
        assert p.returncode == 0 and p.stdout.count("sni=allowed.test") == 2, p.stderr
        with open(asked) as f:
            qs = [json.loads(line) for line in f if line.strip()]
        assert [q["host"] for q in qs].count("allowed.test") == 1, qs     # remembered
        m = net.mark()
        p = inside(sb, net, ["curl", "-sS", "--cacert", "ca.pem", "https://other.test/"],
                   "--approver", approver)
        assert p.returncode != 0 and "other.test" in p.stderr, p.stderr
        assert [e for e in net.since(m) if e["ev"] == "accept"] == []
        # no controlling terminal (a new session): nobody to ask, so denied
        full = ["ip", "netns", "exec", NS_A] + sb.exec_cmd(
            ["curl", "-sS", "--cacert", "ca.pem", "https://allowed.test/"])
        p = subprocess.run(full, capture_output=True, text=True, timeout=60, cwd=sb.workdir,
                           stdin=subprocess.DEVNULL, start_new_session=True)
        assert p.returncode != 0 and "allowed.test" in p.stderr, p.stdout
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)

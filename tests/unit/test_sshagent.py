"""The ssh-agent proxy's protocol and policy (credentials/sshagent.py) and the
profile section (policy/ssh_agent.py), against a scripted agent outside: what is
listed, what is signed, what never reaches the real agent."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import struct
import threading
from pathlib import Path

import pytest

from confine.credentials import sshagent as sa
from confine.errors import ProfileError
from confine.policy import load
from confine.policy.ssh_agent import SshAgent, fingerprint_error, split_host


def s(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def key(name: bytes) -> bytes:
    return s(b"ssh-ed25519") + s(name.ljust(32, b"k"))


LISTED, OTHER, HOSTKEY = key(b"listed"), key(b"other"), key(b"host")
SID = b"s" * 32


class FakeAgent:
    """The person's agent: lists LISTED and OTHER, signs anything, accepts every
    binding; records each message type it got."""

    def __init__(self, path: str) -> None:
        self.got: list[int] = []
        self.l = socket.socket(socket.AF_UNIX)
        self.l.bind(path)
        self.l.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.l.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        with c:
            while True:
                try:
                    body = sa.read_frame(c)
                except (EOFError, OSError, sa.Malformed):
                    return
                self.got.append(body[0])
                if body[0] == sa.REQUEST_IDENTITIES:
                    out = bytes([12]) + struct.pack(">I", 2) + s(LISTED) + s(b"a") + s(OTHER) + s(b"b")
                elif body[0] == sa.SIGN_REQUEST:
                    out = bytes([14]) + s(b"signature")
                else:
                    out = bytes([6])
                c.sendall(sa.frame(out))


@pytest.fixture
def proxy(tmp_path: Path):
    up = FakeAgent(str(tmp_path / "up.sock"))
    events: list[dict] = []
    made: list[sa.Proxy] = []

    def make(**kw: object) -> tuple[sa.Proxy, str]:
        pol = SshAgent(keys=(sa.fingerprint(LISTED),), hosts=(("forge.test", 22),),
                       namespaces=("git",), **kw)  # type: ignore[arg-type]
        hk = sa.HostKeys(keys={("forge.test", 22): {HOSTKEY}})
        p = sa.Proxy(pol, str(tmp_path / "up.sock"), hk, emit=events.append,
                     refused=lambda k, line, ev: events.append({**ev, "line": line}))
        path = str(tmp_path / f"in{len(made)}.sock")
        ls = socket.socket(socket.AF_UNIX)
        ls.bind(path)
        ls.listen()
        p.start(ls)
        made.append(p)
        return p, path
    yield make, up, events
    for p in made:
        p.stop()
    up.l.close()


def call(c: socket.socket, body: bytes) -> bytes:
    c.sendall(sa.frame(body))
    return sa.read_frame(c, 5)


def connect(path: str) -> socket.socket:
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    c.settimeout(5)
    return c


def bind(c: socket.socket, forwarding: bool = False, hostkey: bytes = HOSTKEY) -> bytes:
    return call(c, bytes([27]) + s(sa.SESSION_BIND.encode()) + s(hostkey) + s(SID) + s(b"sig")
                + bytes([forwarding]))


def login(k: bytes, sid: bytes = SID) -> bytes:
    data = (s(sid) + bytes([50]) + s(b"git") + s(b"ssh-connection") + s(b"publickey") + b"\1"
            + s(b"ssh-ed25519") + s(k))
    return bytes([13]) + s(k) + s(data) + struct.pack(">I", 0)


def sshsig(k: bytes, ns: bytes) -> bytes:
    data = b"SSHSIG" + s(ns) + s(b"") + s(b"sha512") + s(b"h" * 64)
    return bytes([13]) + s(k) + s(data) + struct.pack(">I", 0)


def test_lists_only_the_profile_keys(proxy):
    make, up, events = proxy
    _, path = make()
    with connect(path) as c:
        r = sa.Reader(call(c, bytes([11]))[1:])
        n = r.uint32()
        blobs = []
        for _ in range(n):
            blobs.append(r.string())
            r.string()
        r.end()
    assert blobs == [LISTED]
    assert {"event": "ssh-agent", "kind": "list", "listed": 1, "hidden": 1} in events


def test_login_signed_only_for_a_bound_known_host(proxy):
    make, up, events = proxy
    _, path = make()
    with connect(path) as c:
        assert call(c, login(LISTED))[0] == sa.FAILURE         # nothing bound yet
        assert bind(c)[0] == sa.SUCCESS
        assert call(c, login(OTHER))[0] == sa.FAILURE          # not listed
        assert call(c, login(LISTED, sid=b"t" * 32))[0] == sa.FAILURE   # another session
        assert call(c, login(LISTED))[0] == 14
    assert up.got.count(sa.SIGN_REQUEST) == 1
    with connect(path) as c:
        bind(c, hostkey=key(b"elsewhere"))
        assert call(c, login(LISTED))[0] == sa.FAILURE         # a host no entry has
    with connect(path) as c:
        bind(c, forwarding=True)
        assert call(c, login(LISTED))[0] == sa.FAILURE         # agent forwarding
    assert up.got.count(sa.SIGN_REQUEST) == 1
    allowed = [e for e in events if e.get("kind") == "sign" and e.get("decision") == "allow"]
    assert len(allowed) == 1 and allowed[0]["host"] == "forge.test"
    reasons = " ".join(str(e.get("reason")) for e in events if e.get("decision") == "deny")
    for want in ("bound no host", "not in ssh_agent.keys", "another session",
                 "not known for any host", "forwarding"):
        assert want in reasons


def test_file_signature_by_namespace_and_decision(proxy):
    make, up, _ = proxy
    _, path = make()
    with connect(path) as c:
        assert call(c, sshsig(LISTED, b"git"))[0] == 14
        assert call(c, sshsig(LISTED, b"file"))[0] == sa.FAILURE
        assert call(c, bytes([13]) + s(LISTED) + s(b"arbitrary data") + b"\0\0\0\0")[0] == sa.FAILURE
    _, path = make(decision="deny")
    with connect(path) as c:
        assert call(c, sshsig(LISTED, b"git"))[0] == sa.FAILURE
    asked: list[sa.Use] = []
    p, path = make(decision="ask")
    p.ask = lambda use: (asked.append(use), (use.namespace == "git", "test"))[1]
    with connect(path) as c:
        assert call(c, sshsig(LISTED, b"git"))[0] == 14
        assert asked and asked[0].kind == "file" and asked[0].key == sa.fingerprint(LISTED)
    assert up.got.count(sa.SIGN_REQUEST) == 2


@pytest.mark.parametrize("body", [bytes([17]) + s(b"ssh-ed25519"), bytes([18]) + s(LISTED),
                                  bytes([19]), bytes([22]) + s(b"pw"), bytes([23]) + s(b"pw"),
                                  bytes([20]) + s(b"id") + s(b"pin"), bytes([25]), bytes([99]),
                                  bytes([27]) + s(b"query"), bytes([1])])
def test_changes_and_unknown_messages_never_reach_the_real_agent(proxy, body):
    make, up, events = proxy
    _, path = make()
    with connect(path) as c:
        assert call(c, body)[0] == sa.FAILURE
        assert call(c, bytes([11]))[0] == 12           # the connection goes on
    assert up.got == [sa.REQUEST_IDENTITIES]
    assert events and events[0]["decision"] == "deny"


def test_malformed_and_oversized_frames_close_the_connection(proxy):
    make, up, _ = proxy
    _, path = make()
    with connect(path) as c:
        c.sendall(struct.pack(">I", sa.MAX_MESSAGE + 1))
        assert c.recv(10) == b""
    with connect(path) as c:
        c.sendall(sa.frame(bytes([13]) + struct.pack(">I", 1000)))   # a string past its frame
        assert c.recv(10) == b""
    assert up.got == []


def test_known_hosts_plain_port_hashed_negated_revoked(tmp_path: Path):
    blob_a, blob_b, blob_c = key(b"a"), key(b"b"), key(b"c")
    b64 = lambda b: base64.b64encode(b).decode()   # noqa: E731
    salt = os.urandom(20)
    hashed = "|1|%s|%s" % (b64(salt), b64(hmac.new(salt, b"[h.test]:2222", hashlib.sha1).digest()))
    f = tmp_path / "kh"
    f.write_text(f"forge.test,!bad.test ssh-ed25519 {b64(blob_a)}\n"
                 f"{hashed} ssh-ed25519 {b64(blob_b)}\n"
                 f"*.test ssh-ed25519 {b64(blob_c)}\n"
                 f"@revoked * ssh-ed25519 {b64(blob_c)}\n"
                 f"forge.test ssh-rsa {b64(blob_a)}\n")       # type mismatch: ignored
    hk = sa.HostKeys.load([str(f), str(tmp_path / "missing")],
                          [("forge.test", 22), ("h.test", 2222), ("bad.test", 22), ("h.test", 22)])
    assert hk.hosts_of(blob_a) == [("forge.test", 22)]
    assert hk.hosts_of(blob_b) == [("h.test", 2222)]
    assert hk.hosts_of(blob_c) == []                     # revoked
    assert ("bad.test", 22) in hk.unknown() and hk.read == (str(f),)


def test_profile_section_errors_name_line_and_key(tmp_path: Path):
    fp = "SHA256:" + base64.b64encode(b"x" * 32).decode().rstrip("=")
    assert fingerprint_error(fp) is None
    assert fingerprint_error("MD5:aa:bb") and fingerprint_error(fp[:-1])
    assert split_host("forge.test:2222") == ("forge.test", 2222)
    assert split_host("[::1]:22") == ("::1", 22) and split_host("a b") is None
    p = tmp_path / "p.yaml"
    p.write_text(f"ssh_agent:\n  keys: [{fp}]\n  hosts: [forge.test]\n  decision: allow\n")
    pol = load.load(str(p), workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path))
    assert pol.ssh_agent is not None and pol.ssh_agent.keys == (fp,)
    assert pol.ssh_agent.hosts == (("forge.test", 22),)
    for text, want in ((f"ssh_agent:\n  keys: [{fp}, 'SHA256:nope']\n", "p.yaml:2: ssh_agent.keys"),
                       ("ssh_agent:\n  hosts: [forge.test]\n  decision: maybe\n",
                        "p.yaml:3: ssh_agent.decision"),
                       ("ssh_agent:\n  hosts: ['a b']\n", "p.yaml:2: ssh_agent.hosts"),
                       ("ssh_agent:\n  keyz: []\n", "p.yaml:2: unknown key 'ssh_agent.keyz'")):
        p.write_text(text)
        with pytest.raises(ProfileError, match=want):
            load.load(str(p), workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path))
    p.write_text("network: {}\n")
    assert load.load(str(p), workdir=str(tmp_path), home=str(tmp_path),
                     tmp=str(tmp_path)).ssh_agent is None

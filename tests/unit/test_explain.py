"""The refusal -> grant mapping (confine/policy/explain.py), the audit record
parser (kernel/audit.py) and the run's Events: pure, no root.

Each suggestion is checked against what it must never be: a secret, a
run-later path (runlater.py), git's own protected files, a host-root socket."""
from __future__ import annotations

import json
import os

import pytest
import yaml

from confine.kernel import audit
from confine.policy import explain as ex
from confine.policy.load import load
from confine.policy.patterns import effective
from confine.runtime.events import Events

HOME = "/home/u"


def g(r: ex.Refusal) -> ex.Grant:
    return ex.grant(r, HOME)


# ------------------------------------------------------------ Landlock records

def test_audit_record_fields_quoted_hex_and_plain():
    f = audit.parse('audit(1.2:3): domain=1a blockers=fs.read_file path="/tmp/a b" '
                    'dev="vda" ino=5')
    assert f == {"domain": "1a", "blockers": "fs.read_file", "path": "/tmp/a b",
                 "dev": "vda", "ino": "5"}
    odd = "/tmp/x\ny"
    f = audit.parse(f"audit(1.2:3): domain=1a blockers=fs.read_dir path={odd.encode().hex().upper()}")
    assert f["path"] == odd
    # a plain field that looks like hex stays as it is (only names are hex-encoded)
    assert audit.parse("domain=ABCD src=8000")["domain"] == "ABCD"


def test_landlock_read_of_a_repository_grants_the_repository():
    r = ex.from_landlock(audit.parse('domain=1 blockers=fs.read_file path="/srv/up.git/HEAD"'))
    assert r is not None and (r.kind, r.layer) == ("read", "landlock")
    gr = g(r)
    assert (gr.key, gr.value, gr.flag) == ("filesystem.read", "/srv/up.git", "--read /srv/up.git")
    r2 = ex.from_landlock({"blockers": "fs.read_dir", "path": "/srv/up.git/objects/ab"})
    assert r2 is not None and ex.key(r2, g(r2)) == ex.key(r, gr)     # one line for the clone
    r3 = ex.from_landlock({"blockers": "fs.read_file", "path": "/srv/proj/.git/config"})
    assert r3 is not None and g(r3).value == "/srv/proj"
    line = ex.line(r, gr)
    assert "/srv/up.git/HEAD" in line and "--read /srv/up.git" in line and "landlock" in line


def test_landlock_tcp_bind_and_connect():
    r = ex.from_landlock(audit.parse("domain=1 blockers=net.bind_tcp saddr=127.0.0.1 src=8000"))
    assert r is not None and r.kind == "bind_tcp"
    gr = g(r)
    assert (gr.key, gr.value) == ("network.bind_tcp", 8000)
    assert "network.bind_tcp: [8000]" in ex.line(r, gr)
    # connect_tcp is the agent's own loopback: a refused loopback connect suggests the
    # host's service by name (the flag that reaches it), connect_tcp only in the note
    r = ex.from_landlock({"blockers": "net.connect_tcp", "daddr": "127.0.0.1", "dest": "5432"})
    assert r is not None and r.kind == "connect_tcp"
    gr = g(r)
    assert (gr.key, gr.value, gr.flag) == ("network.allow", "localhost:5432",
                                           "--allow-host localhost:5432")
    line = ex.line(r, gr)
    assert "any host" not in line and "network.connect_tcp: [5432]" in line and "own" in line
    # another address is a host the profile does not name
    r = ex.from_landlock({"blockers": "net.connect_tcp", "daddr": "192.0.2.7", "dest": "80"})
    assert r is not None and r.kind == "host"
    assert (g(r).key, g(r).value, g(r).flag) == ("network.allow", "192.0.2.7:80",
                                                 "--allow-host 192.0.2.7:80")
    r = ex.connect_refusal(ex.LANDLOCK, "443", "2001:db8::1")
    assert (g(r).value, g(r).flag) == ("[2001:db8::1]", "--allow-host [2001:db8::1]")


@pytest.mark.parametrize("path", [f"{HOME}/.ssh/id_ed25519", f"{HOME}/.aws", "/etc/shadow",
                                  "/etc/ssh/ssh_host_rsa_key", f"{HOME}/.config/gh/hosts.yml",
                                  f"{HOME}/.ssh"])
def test_a_secret_is_never_suggested(path):
    for b in ("fs.read_file", "fs.write_file"):
        r = ex.from_landlock({"blockers": b, "path": path})
        assert r is not None
        gr = g(r)
        assert gr.cannot and not gr.key and "secret" in gr.cannot, (path, gr)
    # the control: a path beside it is suggested
    r = ex.from_landlock({"blockers": "fs.read_file", "path": f"{HOME}/notes.txt"})
    assert r is not None and g(r).key == "filesystem.read"


def test_a_profile_deny_is_never_suggested():
    r = ex.Refusal("read", "landlock", "/srv/vault/key", "read /srv/vault/key")
    assert ex.grant(r, HOME, deny=("/srv/vault",)).cannot
    assert ex.grant(r, HOME).key == "filesystem.read"


@pytest.mark.parametrize("path", [f"{HOME}/.bashrc", f"{HOME}/.local/bin/x", f"{HOME}/.gitconfig",
                                  "/usr/lib/x.so", "/etc/passwd", HOME,
                                  f"{HOME}/.config/systemd/user/a.service"])
def test_a_run_later_or_system_write_is_never_suggested(path):
    r = ex.from_landlock({"blockers": "fs.write_file", "path": path})
    assert r is not None
    gr = g(r)
    assert gr.cannot and not gr.key, (path, gr)
    assert "cannot be granted" in ex.line(r, gr)


def test_an_ordinary_write_is_suggested():
    r = ex.from_landlock({"blockers": "fs.make_reg", "path": f"{HOME}/.cache/pip"})
    assert r is not None and (g(r).key, g(r).flag) == ("filesystem.write",
                                                      f"--write {HOME}/.cache/pip")


# ------------------------------------------------------------ mediated reasons

def test_protected_name_grants_the_negated_pattern():
    r = ex.from_reason("create /w/.envrc: protected path (.envrc)")
    assert (r.kind, r.layer, r.pattern, r.subject) == ("protected", "name guard", ".envrc",
                                                       "/w/.envrc")
    gr = g(r)
    assert (gr.key, gr.value) == ("protected", "!.envrc")
    assert "protected: ['!.envrc']" in ex.line(r, gr)
    assert ex.line(r, gr).startswith("denied: create /w/.envrc: protected path (.envrc)")


@pytest.mark.parametrize("reason", [
    "create /w/.git/hooks/pre-commit: protected path (.git/hooks/)",
    "open /w/.git/config: protected path (.git/config): git writes it by renaming config.lock",
    "create /w/.gitmodules: protected path (.gitmodules)",
])
def test_git_own_protected_files_are_not_granted(reason):
    gr = g(ex.from_reason(reason))
    assert gr.cannot and not gr.key


@pytest.mark.parametrize("reason", [
    "write /w/a: a file protected at start (another name of it)",
    "create /w/.confine-vet-1: a temporary name of confine's",
    "create /w/.git: a .git file or link would point git at another directory",
    "another name for a protected file: x",
    "git config /w/.git/config: core.hookspath not allowed in a repository of the workdir",
    "git config /w/r/.git/config: key(s) remote.origin.pushurl not allowed in a repository config "
    "written inside the sandbox (remote.origin.pushurl: a local path (a repository whose hooks "
    "would run as you): only a network URL (https://, ssh://, git://, host:path) may be set)",
    "git config /w/r/.git/config: key(s) remote.origin.push not allowed in a repository config "
    "written inside the sandbox (remote.origin.push: a push refspec that deletes upstream refs "
    "on the next push)",
])
def test_internal_refusals_cannot_be_granted(reason):
    gr = g(ex.from_reason(reason))
    assert gr.cannot and not gr.key
    if reason.startswith("git config"):
        # says where the change can be made instead, locations and refspecs included
        assert "network URLs" in gr.cannot and "outside confine" in gr.cannot, gr.cannot


def test_unix_socket_grants_allow_but_not_host_root():
    r = ex.from_reason("connect to unix socket /tmp/s.sock: outside the workdir and "
                       "unix_sockets.allow")
    assert (r.kind, r.subject) == ("unix_socket", "/tmp/s.sock")
    assert (g(r).key, g(r).value) == ("unix_sockets.allow", "/tmp/s.sock")
    r = ex.from_reason("connect to unix socket l (-> /run/x.sock): outside the workdir and "
                       "unix_sockets.allow")
    assert r.subject == "/run/x.sock"
    r = ex.from_reason("connect to unix socket /var/run/docker.sock: outside the workdir and "
                       "unix_sockets.allow")
    assert g(r).cannot and "root on the host" in g(r).cannot


def test_listen_without_a_port():
    r = ex.from_reason("listen() on a TCP socket with no port bound (would bind an ephemeral "
                       "port without Landlock)")
    assert r.kind == "bind_tcp" and g(r).cannot


# ------------------------------------------------------------ the log and explain

def test_events_say_once_log_all_and_explain_reads_it_back(tmp_path):
    log = tmp_path / "run.log"
    sock = tmp_path / "a.sock"
    sock.write_text("")
    said: list[str] = []
    ev = Events(str(log), said.append)
    ev.context(HOME)
    for _ in range(3):
        ev.landlock({"blockers": "fs.read_file", "path": "/srv/up.git/HEAD"})
    ev.landlock({"blockers": "fs.read_dir", "path": "/srv/up.git/refs"})
    ev.landlock({"blockers": "net.bind_tcp", "src": "8000"})
    ev.mediated("create /w/.envrc: protected path (.envrc)")
    ev.mediated(f"connect to unix socket {sock}: outside the workdir and unix_sockets.allow")
    ev.landlock({"blockers": "fs.read_file", "path": f"{HOME}/.ssh/id_rsa"})
    ev.emit({"event": "connect", "decision": "allow", "host": "pypi.org"})
    assert len(said) == 5, said             # the repository once, whatever was read in it
    summary = ev.summary(1)
    assert "8 refused" in summary[0] and str(log) in summary[0]
    ev.close()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 9 and all("time" in x for x in lines)
    rep = ex.report(lines)
    assert rep.grants == {"filesystem.read": ["/srv/up.git"], "network.bind_tcp": [8000],
                          "protected": ["!.envrc"], "unix_sockets.allow": [str(sock)]}
    assert any(".ssh" in c for c in rep.cannot)
    assert rep.counts == {"landlock": 6, "name guard": 1, "mediation": 1}
    # the snippet is a profile: it loads, and grants exactly those
    text = "extends: default\n" + ex.snippet(rep.grants)
    prof = tmp_path / "p.yaml"
    prof.write_text(text)
    assert yaml.safe_load(text)["protected"] == ["!.envrc"]
    wd = tmp_path / "wd"
    wd.mkdir()
    (tmp_path / "srv").mkdir()
    text = text.replace("/srv/up.git", str(tmp_path / "srv"))
    prof.write_text(text)
    pol = load(str(prof), workdir=str(wd), home=os.path.expanduser("~"), tmp=str(tmp_path))
    assert 8000 in pol.network.bind_tcp
    assert ".envrc" not in effective(pol) and ".vscode/" in effective(pol)
    assert str(sock) in [u.path for u in pol.unix_sockets]


def test_a_name_with_terminal_escapes_is_shown_escaped(tmp_path):
    said: list[str] = []
    ev = Events(str(tmp_path / "log"), said.append)
    ev.landlock({"blockers": "fs.read_file", "path": "/srv/\x1b]0;pwned\x07\u202e/x"})
    ev.mediated("create /w/\x1b[2J/.envrc: protected path (.envrc)")
    assert len(said) == 2 and not any(c in "".join(said) for c in "\x1b\x07\u202e"), said
    assert "\\x1b" in said[0]
    ev.close()
    rec = json.loads((tmp_path / "log").read_text().splitlines()[0])
    assert rec["subject"] == "/srv/\x1b]0;pwned\x07\u202e/x"       # the log keeps it exact


def test_events_are_bounded():
    said: list[str] = []
    ev = Events(None, said.append)
    for i in range(500):
        ev.landlock({"blockers": "fs.read_file", "path": f"/srv/d{i}"})
    assert len(said) == 101 and "no more are shown" in said[-1]
    assert sum(ev.refusals.values()) == 500


def test_summary_names_the_landlock_gap_once_and_only_for_a_failed_run(tmp_path):
    ev = Events(str(tmp_path / "log"), lambda s: None)
    ev.unexplained("since audit is off")
    assert ev.summary(0) == []                                # a run that succeeded: silent
    assert ev.summary(130) == [] and ev.summary(143) == []    # ended by a signal: silent
    assert ev.summary(125) == []                  # a nested confine's own error says why
    # a failed run: the one place a refused read may be, and how to grant one
    (gap,) = ev.summary(1)
    assert "since audit is off" in gap and "--read PATH" in gap and "exit status 1" in gap
    ev.mediated("create /w/.envrc: protected path (.envrc)")
    assert len(ev.summary(0)) == 1                            # the count, no gap
    out = ev.summary(1)
    assert len(out) == 2 and "since audit is off" in out[1]
    ev.read_only = {".envrc": ".envrc"}
    assert len(ev.summary(0)) == 1 and "Device or resource busy" in ev.summary(1)[2]
    ev.close()
    rep = ex.report(json.loads(x) for x in (tmp_path / "log").read_text().splitlines())
    assert rep.unseen == ["since audit is off"] and rep.grants == {"protected": ["!.envrc"]}


def test_one_escaping_for_names_in_every_line(capsys):
    from confine.errors import default_warn, printable
    name = "/w/a\udcfe\x1b[2Jb"                     # a byte that is not UTF-8, an escape
    assert printable(name) == "/w/a\\xfe\\x1b[2Jb"
    default_warn(f"raw {name}")                       # a line no one escaped before
    default_warn(f"escaped {printable(name)}")        # ... and one that was: unchanged
    err = capsys.readouterr().err
    assert err == "confine: raw /w/a\\xfe\\x1b[2Jb\nconfine: escaped /w/a\\xfe\\x1b[2Jb\n", err
    from confine.mediation import wire
    rid, rep = wire.decode_reply(wire.Reply(-1, 13, f"create {name}: protected").encode(7))
    assert rid == 7 and rep.reason == f"create {name}: protected"   # the byte survives the wire


def test_gateway_events_from_other_writers_are_explained():
    rep = ex.report([{"event": "connect", "decision": "deny", "layer": "gateway",
                      "host": "evil.example", "port": 443}])
    assert rep.grants == {"network.allow": ["evil.example"]}
    assert ex.report([{"event": "dns", "decision": "allow"}, {"nonsense": 1}]).grants == {}


def test_snippet_quotes_what_yaml_would_misread():
    text = ex.snippet({"filesystem.read": ["/a b", "?odd", "/plain"], "protected": ["!.idea/"],
                       "network.bind_tcp": [8000]})
    data = yaml.safe_load(text)
    assert data == {"filesystem": {"read": ["/a b", "?odd", "/plain"]},
                    "protected": ["!.idea/"], "network": {"bind_tcp": [8000]}}


def test_enclosing_repo(tmp_path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    sub = tmp_path / "repo" / "a" / "b"
    sub.mkdir(parents=True)
    assert ex.enclosing_repo(str(sub)) == str(tmp_path / "repo")
    assert ex.enclosing_repo(str(tmp_path / "repo")) is None     # the root itself: fine
    (sub / ".git").mkdir()
    assert ex.enclosing_repo(str(sub)) is None                   # a repository of its own


# ------------------------------------------------------------ confine explain

def test_cli_explain_text_json_and_bad_input(tmp_path):
    from click.testing import CliRunner

    from confine.cli.main import cli
    log = tmp_path / "run.log"
    ev = Events(str(log), lambda s: None)
    ev.context(HOME)
    ev.landlock({"blockers": "net.bind_tcp", "src": "8000"})
    ev.landlock({"blockers": "fs.read_file", "path": f"{HOME}/.ssh/id_rsa"})
    ev.close()
    with open(log, "a") as f:
        f.write("not json\n[1]\n")
    r = CliRunner().invoke(cli, ["explain", str(log)])
    assert r.exit_code == 0, r.output
    assert "bind_tcp:\n    - 8000" in r.output and "Cannot be granted" in r.output
    assert ".ssh" in r.output.split("Cannot be granted")[1]
    assert "2 lines were not JSON" in r.output
    r = CliRunner().invoke(cli, ["explain", "--json", str(log)])
    d = json.loads(r.output)
    assert d["grants"] == {"network.bind_tcp": [8000]} and d["skipped_lines"] == 2
    assert yaml.safe_load(d["profile_yaml"]) == {"network": {"bind_tcp": [8000]}}
    r = CliRunner().invoke(cli, ["explain"], input=log.read_text())      # standard input
    assert r.exit_code == 0 and "8000" in r.output
    empty = tmp_path / "empty.log"
    empty.write_text("")
    r = CliRunner().invoke(cli, ["explain", str(empty)])
    assert r.exit_code == 0 and "nothing was refused" in r.output
    r = CliRunner().invoke(cli, ["explain", str(tmp_path / "missing.log")])
    assert r.exit_code != 0


# ------------------------------------------------------------ attributing audit records

def _watch(got: list):
    import socket as _s
    a, b = _s.socketpair()
    b.close()
    return audit.LandlockWatch(a, got.append)


def test_watch_passes_on_only_its_own_domain_whatever_the_order():
    got: list = []
    w = _watch(got)
    w.add_pid(100)
    acc = 'audit(1.0:1): domain={d} blockers=fs.read_file path="/x/{n}"'
    dom = "audit(1.0:2): domain={d} status=allocated mode=enforcing pid={p} uid=0 exe=\"/p\""
    # ours: the access record comes first, then the domain record naming our pid
    w._record(audit.LANDLOCK_ACCESS, acc.format(d="a1", n="mine"))
    w._record(audit.LANDLOCK_DOMAIN, dom.format(d="a1", p=100))
    w._record(audit.LANDLOCK_ACCESS, acc.format(d="a1", n="mine2"))
    # another sandbox's: never passed on
    w._record(audit.LANDLOCK_ACCESS, acc.format(d="b2", n="theirs"))
    w._record(audit.LANDLOCK_DOMAIN, dom.format(d="b2", p=999))
    w._record(audit.LANDLOCK_ACCESS, acc.format(d="b2", n="theirs2"))
    # a pid we learn later (pid 1 of the agent's namespace says it after restricting)
    w._record(audit.LANDLOCK_ACCESS, acc.format(d="c3", n="late"))
    w._record(audit.LANDLOCK_DOMAIN, dom.format(d="c3", p=200))
    assert [f["path"] for f in got] == ["/x/mine", "/x/mine2"]
    w.add_pid(200)
    assert [f["path"] for f in got] == ["/x/mine", "/x/mine2", "/x/late"]
    # the deallocation record and other types change nothing
    w._record(audit.LANDLOCK_DOMAIN, "domain=a1 status=deallocated denials=3")
    w._record(1300, "arch=c000003e syscall=257 success=no")
    assert len(got) == 3 and w.seen == 3
    w.sock.close()


def test_watch_holds_a_bounded_amount_for_unknown_domains():
    got: list = []
    w = _watch(got)
    for d in range(1000):
        for n in range(50):
            w._record(audit.LANDLOCK_ACCESS, f'domain=d{d} blockers=fs.read_file path="/{n}"')
        w._record(audit.LANDLOCK_DOMAIN, f"domain=d{d} status=allocated pid={5000 + d}")
    assert len(w.held) <= audit.MAX_PENDING and len(w.made_by) <= audit.MAX_PENDING
    assert all(len(v) <= audit.MAX_PER_DOMAIN for v in w.held.values())
    assert got == []
    w.sock.close()


def test_watch_reads_netlink_messages_and_the_fence():
    import struct as _st
    got: list = []
    w = _watch(got)
    w.add_pid(7)

    def msg(typ: int, text: str) -> bytes:
        body = text.encode() + b"\0"
        pad = (-len(body)) % 4
        return _st.pack("=IHHII", 16 + len(body), typ, 0, 0, 0) + body + b"\0" * pad

    w._fence = "confine-fence-x"
    data = (msg(audit.LANDLOCK_DOMAIN, "domain=z status=allocated pid=7")
            + msg(audit.LANDLOCK_ACCESS, "domain=z blockers=net.bind_tcp saddr=127.0.0.1 src=80")
            + msg(audit.AUDIT_USER_MSG, "pid=1 uid=0 msg='confine-fence-x'")
            + b"\x01\x02")                                  # a torn tail is ignored
    w._messages(data)
    assert got == [{"domain": "z", "blockers": "net.bind_tcp", "saddr": "127.0.0.1",
                    "src": "80"}]
    assert w._fenced.is_set()
    w.sock.close()


def test_explain_judges_each_line_again():
    """A log altered after the run cannot get a secret or a run-later path suggested."""
    forged = [
        {"event": "refusal", "layer": "landlock", "kind": "write", "subject": f"{HOME}/.bashrc",
         "what": "write x", "grant": {"key": "filesystem.write", "value": f"{HOME}/.bashrc"}},
        {"event": "refusal", "layer": "landlock", "kind": "read", "subject": f"{HOME}/.ssh/id",
         "what": "read x", "grant": {"key": "filesystem.read", "value": f"{HOME}/.ssh"}},
        {"event": "refusal", "layer": "landlock", "kind": "read", "subject": "/srv/a",
         "what": "read /srv/a", "grant": {"key": "filesystem.read", "value": "/"}},
        {"event": "refusal", "layer": "name guard", "kind": "protected", "pattern": ".git/hooks/",
         "subject": "/w/.git/hooks/x", "what": "create x",
         "grant": {"key": "protected", "value": "!.git/hooks/"}},
    ]
    rep = ex.report(forged, home=HOME)
    assert rep.grants == {} and len(rep.cannot) == 4, rep
    honest = [{"event": "refusal", "layer": "landlock", "kind": "read", "subject": "/srv/a",
               "what": "read /srv/a", "grant": {"key": "filesystem.read", "value": "/srv/a"}}]
    assert ex.report(honest, home=HOME).grants == {"filesystem.read": ["/srv/a"]}


def test_git_internals_of_an_existing_repository_are_never_suggested():
    """The snapshot names an existing repository's hooks literally (old/.git/hooks):
    as git's own as the .git/hooks/ pattern, so never offered as a grant."""
    for pat in ("old/.git/hooks", "a/b/.git/config", "sub/.gitmodules", "bare.git/hooks"):
        r = ex.Refusal("protected", ex.GUARD, "x", "create x: protected path", pat)
        g = ex.grant(r, "/home/u", (), [])
        assert g.cannot and "git's own" in g.cannot, (pat, g)


def test_new_directory_beside_an_ungrantable_one_suggests_itself():
    """`git worktree add ../wt` from a project in the home: the home cannot be
    granted, the new directory can (made first); a start-up file cannot."""
    r = ex.Refusal("write", ex.READ_ONLY_HOST, "/home/u", "create /home/u/wt")
    gr = ex.grant(r, "/home/u")
    assert (gr.key, gr.value, gr.flag) == ("filesystem.write", "/home/u/wt", "--write /home/u/wt")
    assert "mkdir -p /home/u/wt" in gr.note
    r = ex.Refusal("write", ex.READ_ONLY_HOST, "/home/u", "create /home/u/.bashrc")
    assert ex.grant(r, "/home/u").cannot

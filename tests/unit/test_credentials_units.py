"""Credentials (issue 24): the profile section and --credential, the sources, the
placeholder rule, the agent's environment and the per-use judge with a scripted approver.

Threat: a secret sent where the person did not bind it, taken from a place someone else
controls, or shown in an error line or an event. Each refusal has an accepted neighbour.
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
import textwrap

import pytest

from confine.credentials import sources, use
from confine.credentials.binding import Binding, Target
from confine.errors import ProfileError
from confine.plan import env as envmod
from confine.policy import credentials as pc
from confine.policy import load


def _load(tmp_path, text: str):
    p = tmp_path / "p.yaml"
    p.write_text(textwrap.dedent(text))
    return load.load(str(p), workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path))


def _errors(tmp_path, text: str) -> list[str]:
    with pytest.raises(ProfileError) as e:
        _load(tmp_path, text)
    return [str(e.value), *e.value.more]


def test_the_issue_s_minimal_form_loads(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    pol = _load(tmp_path, f"""
        network:
          allow: [forge.example]
          upstream_ca: [{ca}]
        credentials:
          - name: FORGE_TOKEN
            from_env: FORGE_TOKEN
            hosts: [forge.example]
          - name: TASK_TOKEN
            mint: [mint-cmd, --scope, repo]
            revoke: [revoke-cmd]
            hosts: [forge.example, "*.forge.example:8443",
                    {{host: api.forge.example, methods: [GET, POST], paths: [/api/]}}]
            headers: [X-Api-Key]
            decision: ask
        """)
    assert pol.network.upstream_ca == (str(ca),)
    a, b = pol.credentials
    assert (a.name, a.source, a.ref, a.decision) == ("FORGE_TOKEN", "env", ("FORGE_TOKEN",), "allow")
    assert a.targets == (Target("forge.example", 443),)
    assert (b.source, b.ref, b.revoke, b.headers) == ("mint", ("mint-cmd", "--scope", "repo"),
                                                      ("revoke-cmd",), ("x-api-key",))
    assert b.targets[1:] == (Target("*.forge.example", 8443),
                             Target("api.forge.example", 443, frozenset({"GET", "POST"}),
                                    ("/api/",)))
    assert pol.to_dict()["credentials"][1]["hosts"][2] == "api.forge.example GET,POST /api/"


BAD = [
    ("- {name: A, from_env: A, from_file: /x, hosts: [a.example]}", ":3: credentials[A]: give exactly one"),
    ("- {name: A, hosts: [a.example]}", ":3: credentials[A]: give exactly one"),
    ("- {name: A, from_command: gh auth token, hosts: [a.example]}", "from_command: must be a command as a non-empty list"),
    ("- {name: A, from_env: A, hosts: [10.0.0.1]}", "bound to host names, not addresses"),
    ("- {name: A, from_env: A, hosts: []}", "credentials[A].hosts: must be a non-empty list"),
    ("- {name: A, from_env: A}", "hosts: is required"),
    ("- {name: A, from_env: A, hostz: [a.example]}", "unknown key 'credentials.hostz' (did you mean 'hosts'?)"),
    ("- {name: A, from_env: A, hosts: [a.example], decision: maybe}", "'maybe' is not one of allow, ask, deny"),
    ("- {name: A, from_env: A, hosts: [a.example], revoke: [x]}", "only a minted credential"),
    ("- {name: A, from_env: A, hosts: [{host: a.example, methods: [get]}]}", "'get' is not an HTTP method"),
    ("- {name: A, from_env: A, hosts: [{host: a.example, paths: [/a/../b]}]}", "is not a path prefix"),
    ("- {name: A, from_env: A, hosts: [a.example], headers: [Host]}", "is not a custom header name"),
    ("- {name: 1A, from_env: A, hosts: [a.example]}", "is not an environment variable name"),
    ("- {name: A, from_file: relative/t, hosts: [a.example]}", "must be absolute"),
    ("- {name: A, from_file: '{workdir}/t', hosts: [a.example]}", "must be absolute"),
    ("- {name: A, from_env: A, hosts: ['*.com']}", "public suffix"),
    ("- {name: A, from_env: A, hosts: [{host: a.example, host: b.example}]}",
     "duplicate key 'credentials[A].hosts.host'"),
    ("- {name: A, from_env: A, hosts: [{host: a.example, path: [/a/]}]}",
     "unknown key 'credentials[A].hosts.path' (did you mean 'paths'?)"),
    ("- {name: A, from_env: A, hosts: [a.example], optional: 'yes'}", "credentials[A].optional: must be true or false"),
]


@pytest.mark.parametrize("entry,why", BAD, ids=[b[1][:40] for b in BAD])
def test_bad_entries_name_line_and_key(tmp_path, entry, why):
    errs = _errors(tmp_path, f"""
        credentials:
          {entry}
          - {{name: GOOD, from_env: GOOD, hosts: [a.example]}}
        """)
    assert len(errs) == 1 and why in errs[0] and errs[0].startswith(f"{tmp_path}/p.yaml:3:")


def test_duplicates_and_upstream_ca_must_exist(tmp_path):
    errs = _errors(tmp_path, """
        credentials:
          - {name: A, from_env: A, hosts: [a.example]}
          - {name: A, from_env: B, hosts: [a.example]}
        """)
    assert "p.yaml:4: credentials: A is bound twice" in errs[0]
    errs = _errors(tmp_path, f"network:\n  upstream_ca: [{tmp_path}/missing.pem]\n")
    assert "p.yaml:2: network.upstream_ca:" in errs[0] and "No such file" in errs[0]
    (tmp_path / "not.pem").write_text("hello\n")
    errs = _errors(tmp_path, f"network:\n  upstream_ca: [{tmp_path}/not.pem]\n")
    assert "no PEM certificate" in errs[0]


def test_credential_flag(tmp_path):
    c = pc.from_flag("GH_TOKEN=github.com,api.github.com:8443")
    assert (c.name, c.source, c.ref) == ("GH_TOKEN", "env", ("GH_TOKEN",))
    assert c.targets == (Target("github.com", 443), Target("api.github.com", 8443))
    for bad, why in (("GH_TOKEN", "name the hosts"), ("GH_TOKEN=", "name the hosts"),
                     ("1X=a.example", "not an environment variable name"),
                     ("X=192.0.2.1", "not addresses")):
        with pytest.raises(ProfileError, match=why):
            pc.from_flag(bad)
    # the flag replaces the profile's entry of the same name
    p = tmp_path / "p.yaml"
    p.write_text("credentials:\n  - {name: GH_TOKEN, from_command: [gh, auth, token], "
                 "hosts: [github.com]}\n")
    pol = load.load(str(p), workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path),
                    extra_credentials=["GH_TOKEN=gitlab.example"])
    assert [(x.name, x.source, x.targets[0].host) for x in pol.credentials] == \
        [("GH_TOKEN", "env", "gitlab.example")]


def test_builtin_agent_profiles_bind_their_api_keys(tmp_path):
    for name, var, host in (("claude-code", "ANTHROPIC_API_KEY", "api.anthropic.com"),
                            ("codex", "OPENAI_API_KEY", "api.openai.com")):
        pol = load.load(name, workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path))
        (c,) = pol.credentials
        assert (c.name, c.ref, c.optional, c.targets) == (var, (var,), True, (Target(host, 443),))
        assert var not in pol.env.passthrough


# --- placeholders ---

@pytest.mark.parametrize("value", [
    "ghp_" + "aB3" * 12, "github_pat_11ABCDEFG0" + "x" * 72, "sk-ant-api03-" + "Zz9-_" * 18,
    "sk-proj-" + "q1W2" * 12, "glpat-" + "a1B2c3D4e5F6g7H8i9J0", "0123456789abcdef" * 4,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
])
def test_placeholder_keeps_prefix_length_and_classes(value):
    ph = sources.placeholder(value)
    assert ph != value and len(ph) == len(value)
    prefix = next(p for p in sources.PREFIXES + ("",) if value.startswith(p))
    assert ph.startswith(prefix)
    hexy = re.fullmatch(r"[0-9a-f]+", value) is not None
    for v, p in zip(value[len(prefix):], ph[len(prefix):], strict=True):
        if hexy:
            assert p in "0123456789abcdef"
        elif v.islower() or v.isupper() or v.isdigit():
            assert (p.islower(), p.isupper(), p.isdigit()) == (v.islower(), v.isupper(),
                                                               v.isdigit())
        else:
            assert p == v
    assert sources.placeholder(value) != ph            # fresh for each run


def test_short_values_get_a_long_random_placeholder():
    assert re.fullmatch(r"sk-[0-9a-f]{32}", sources.placeholder("sk-confine-test"))
    assert re.fullmatch(r"confine-[0-9a-f]{32}", sources.placeholder("hunter22"))
    with pytest.raises(sources.SourceError, match="fewer than 8 characters"):
        sources.check_value("T", "from_env X", "hunter2")


# --- sources ---

def test_from_file_owner_and_mode(tmp_path):
    f = tmp_path / "t"
    f.write_text("  tok-1234567890\n")
    os.chmod(f, 0o600)
    assert sources.from_file("T", str(f)) == ("tok-1234567890", [])
    os.chmod(f, 0o640)
    assert "readable by group" in sources.from_file("T", str(f))[1][0]
    os.chmod(f, 0o620)
    with pytest.raises(sources.SourceError, match="writable by group or others"):
        sources.from_file("T", str(f))
    os.chmod(f, 0o600)
    if os.geteuid() == 0:
        os.chown(f, 4242, 4242)
        with pytest.raises(sources.SourceError, match="belongs to uid 4242, not to you"):
            sources.from_file("T", str(f))
        os.chown(f, 0, 0)
    with pytest.raises(sources.SourceError, match="not a regular file"):
        sources.from_file("T", str(tmp_path))
    f.write_text("two\nlines\n")
    with pytest.raises(sources.SourceError, match="line break") as e:
        sources.from_file("T", str(f))
    assert "lines" not in str(e.value)


def test_from_command_output_forms_and_failures():
    got = sources.from_command("T", "mint", ["/bin/echo", "-e", r"tok12345\n2030-01-01"])
    assert (got.value, got.expires) == ("tok12345", "2030-01-01")
    got = sources.from_command("T", "mint", [sys.executable, "-c", "import json; print(json.dumps("
                                              "{'token': 'tok98765', 'expiration': 'soon'}))"])
    assert (got.value, got.expires) == ("tok98765", "soon")
    assert "tok98765" not in repr(got)
    with pytest.raises(sources.SourceError, match=r"exited with status 3: oops") as e:
        sources.from_command("T", "from_command",
                             ["/bin/sh", "-c", "echo ON-STDOUT | tr A-Z a-z; echo oops >&2; exit 3"])
    assert "on-stdout" not in str(e.value)
    with pytest.raises(sources.SourceError, match="no answer in 0.3 s"):
        sources.from_command("T", "from_command", ["/bin/sleep", "5"], timeout=0.3)
    with pytest.raises(sources.SourceError, match="No such file"):
        sources.from_command("T", "from_command", ["/nonexistent/gh"])


# --- the agent's environment ---

def test_the_credential_wins_and_other_copies_are_dropped():
    env = {"GH_TOKEN": "real-value-123", "COPY": "x real-value-123 y", "PATH": "/usr/bin"}
    out, notes = envmod.with_credentials(env, {"GH_TOKEN": "ph-000"}, ["real-value-123"])
    assert out == {"GH_TOKEN": "ph-000", "PATH": "/usr/bin"}
    assert any(n.startswith("GH_TOKEN: the credential's placeholder replaces") for n in notes)
    assert any(n.startswith("COPY not passed") for n in notes)
    assert not any("real-value" in n for n in notes)
    # the second call (at the start) judges what env.pass gave, not the --dry-run stand-ins
    marked = {"GH_TOKEN": "(stand-in)", "SKIPPED": "(stand-in)", "PATH": "/usr/bin"}
    out, notes = envmod.with_credentials(marked, {"GH_TOKEN": "ph-000"}, ["real-value-123"],
                                         before={"GH_TOKEN": "real-value-123", "SKIPPED": None})
    assert out == {"GH_TOKEN": "ph-000", "PATH": "/usr/bin"} and len(notes) == 1


# --- per use ---

def _binding(decision: str = "allow") -> Binding:
    return Binding(name="T", placeholder="ph", value="secret-value-xyz", decision=decision,
                   targets=(Target("forge.example", 443),
                            Target("api.forge.example", 443, frozenset({"GET"}), ("/api/",))))


def test_matches_host_port_method_path():
    b = _binding()
    ok = [("forge.example", 443, "POST", "/x"), ("FORGE.example.", 443, "GET", "/"),
          ("api.forge.example", 443, "GET", "/api/v1?q=1"), ("api.forge.example", 443, "GET", "/api")]
    no = [("forge.example", 8443, "GET", "/"), ("evil.example", 443, "GET", "/"),
          ("api.forge.example", 443, "POST", "/api/"), ("api.forge.example", 443, "GET", "/admin"),
          ("api.forge.example", 443, "GET", "/api/../admin"),
          ("api.forge.example", 443, "GET", "/api/%2e%2e/admin"), ("xforge.example", 443, "GET", "/")]
    assert all(use.matches(b, *u) for u in ok)
    assert not any(use.matches(b, *u) for u in no)


def test_decisions_and_one_event_per_use_without_the_value():
    events: list[dict] = []
    j = use.Judge(events.append, ask=lambda u: pytest.fail("asked"))
    assert j.decide_use(_binding("allow"), "forge.example", "GET", "/", os.getpid(), port=443)
    assert not j.decide_use(_binding("allow"), "evil.example", "GET", "/", None, port=443)
    assert not j.decide_use(_binding("deny"), "forge.example", "GET", "/", None, port=443)
    assert [e["decision"] for e in events] == ["allow", "deny", "deny"]
    assert events[0]["name"] == "T" and events[0]["exe"] == os.readlink("/proc/self/exe")
    assert "secret-value-xyz" not in json.dumps(events)


def test_ask_goes_to_a_scripted_approver_once_per_use(tmp_path):
    log = tmp_path / "asked"
    script = tmp_path / "approver.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        q = json.loads(sys.stdin.readline())
        with open({str(log)!r}, "a") as f:
            f.write(json.dumps(q) + "\\n")
        print(json.dumps({{"decision": "deny" if "/deny" in q["entry"] else "once"}}))
    """))
    events: list[dict] = []
    j = use.Judge(events.append, approver=f"{sys.executable} {script}")
    b = _binding("ask")
    assert j.decide_use(b, "forge.example", "GET", "/a", os.getpid(), port=443)
    assert j.decide_use(b, "forge.example", "GET", "/a", os.getpid(), port=443)
    assert not j.decide_use(b, "forge.example", "POST", "/deny", None, port=443)
    assert not j.decide_use(b, "evil.example", "GET", "/a", None, port=443)   # never asked
    asked = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(asked) == 3
    assert asked[0]["via"] == "credential" and asked[0]["host"] == "forge.example"
    assert asked[0]["entry"].startswith("credential T: GET https://forge.example/a by ")
    assert [e["decision"] for e in events] == ["allow", "allow", "deny", "deny"]
    assert "secret-value-xyz" not in log.read_text() + json.dumps(events)
    # an approver that fails denies
    j = use.Judge(events.append, approver="/bin/false")
    assert not j.decide_use(b, "forge.example", "GET", "/a", None, port=443)
    assert stat.S_ISREG(os.stat(script).st_mode)


# --- pending revokes ---

def test_pending_records_private_alive_and_dead(tmp_path, monkeypatch):
    from confine.credentials import pending
    from confine.credentials import run as credrun
    from confine.errors import ConfineError
    d = tmp_path / "credentials"
    monkeypatch.setattr(pending, "directory", lambda: str(d))
    live = pending.write("LIVE", ("revoke",), "v-live", None)         # this process: alive
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(live).st_mode) == 0o600
    dead = pending.write("DEAD", ("revoke",), "v-dead", "2030")
    rec = json.loads(open(dead).read())
    rec["pid"], rec["start"] = 1, -1                                  # another process's
    os.unlink(dead)
    dead = pending.write("DEAD", ("revoke",), "v-dead", "2030")
    os.chmod(dead, 0o600)
    with open(dead, "w") as f:
        f.write(json.dumps(rec))
    planted = d / "1-PLANTED-0.pending"
    planted.write_text(json.dumps({**rec, "name": "PLANTED"}))
    os.chmod(planted, 0o644)
    revoked, said, events = [], [], []
    pending.recover(lambda n, a, v: revoked.append((n, a, v)), said.append, events.append)
    assert revoked == [("DEAD", ("revoke",), "v-dead")]
    assert not os.path.exists(dead) and os.path.exists(live) and planted.exists()
    assert any("PLANTED" in s and "not a private file" in s for s in said)
    assert any("credential DEAD: revoked now" in s for s in said)
    assert "v-dead" not in json.dumps(events) + " ".join(said)
    # a revoke that fails keeps the record for the next start

    def failing(n, a, v):
        raise ConfineError("revoke exited with status 1")
    rec2 = {**rec, "name": "AGAIN"}
    again = d / "1-AGAIN-0.pending"
    again.write_text(json.dumps(rec2))
    os.chmod(again, 0o600)
    said.clear()
    pending.recover(failing, said.append, events.append)
    assert again.exists() and any("revoke failed again" in s for s in said)
    # minting refuses when a grant of the profile covers the records
    c = pc.Credential(name="M", source="mint", ref=("m",), targets=(), revoke=("r",))
    with pytest.raises(ConfineError, match="readable by the agent through"):
        credrun.check_exposure((c,), [(str(tmp_path), "--read")])
    credrun.check_exposure((c,), [("/usr", "default.yaml:3")])
    # a from_file the agent could read is refused, unless carved out by a deny
    f = pc.Credential(name="F", source="file", ref=(str(tmp_path / "tok"),), targets=())
    with pytest.raises(ConfineError, match="credential F: from_file .* is readable by the agent"):
        credrun.check_exposure((f,), [(str(tmp_path), "p.yaml:4")])
    credrun.check_exposure((f,), [(str(tmp_path), "p.yaml:4")], (str(tmp_path / "tok"),))
    credrun.check_exposure((f,), [("/usr", "default.yaml:3")])


def test_bound_hosts_the_network_never_allows_are_said(tmp_path):
    from confine.credentials import run as credrun
    pol = _load(tmp_path, """
        network:
          allow: [forge.example]
        credentials:
          - {name: A, from_env: A, hosts: [forge.example, "forge.example:8443", typo.example]}
        """)
    lines = credrun.unreachable(pol.credentials, pol.network)
    assert len(lines) == 2 and "forge.example:8443 is not allowed" in lines[0]
    assert "typo.example is not allowed" in lines[1]
    pol = _load(tmp_path, "credentials:\n  - {name: A, from_env: A, hosts: [forge.example]}\n")
    assert len(credrun.unreachable(pol.credentials, pol.network)) == 1   # no network at all

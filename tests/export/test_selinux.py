"""SELinux: the module builds with the refpolicy devel Makefile and with
checkmodule/semodule_package alone, links against Debian's reference policy,
and the linked policy (read with sesearch) gives confine_agent_t what the
Policy grants and nothing of the secrets, capabilities or network."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from confine.export import selinux

from . import selinux_link
from .conftest import BUILTIN, REFPOLICY, REPO, need

MAKEFILE = selinux_link.MAKEFILE
M = selinux.MODULE


def write(dir_, files):
    for rel, text in files.items():
        (dir_ / rel).parent.mkdir(parents=True, exist_ok=True)
        (dir_ / rel).write_text(text)


def refpolicy_build(src_dir):
    need(MAKEFILE)
    r = subprocess.run(["make", "-f", MAKEFILE, f"{M}.pp"], cwd=src_dir, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return src_dir / f"{M}.pp"


def plain_build(src_dir):
    need("checkmodule"), need("semodule_package")
    r = subprocess.run(["checkmodule", "-M", "-m", "-o", f"{M}.mod", f"{M}.te"], cwd=src_dir,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["semodule_package", "-o", f"{M}.pp", "-m", f"{M}.mod", "-f", f"{M}.fc"],
                       cwd=src_dir, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return src_dir / f"{M}.pp"


def test_shipped_module_builds_both_ways(tmp_path):
    shutil.copytree(REPO / "selinux", tmp_path / "src")
    assert refpolicy_build(tmp_path / "src").stat().st_size > 0
    assert plain_build(tmp_path / "src" / "plain").stat().st_size > 0


@pytest.mark.parametrize("name", BUILTIN)
def test_every_profile_builds_both_ways(tmp_path, policies, name):
    write(tmp_path, selinux.parts(policies[name], "/srv/agents/one"))
    refpolicy_build(tmp_path)
    plain_build(tmp_path / "plain")


def test_a_broken_module_is_rejected(tmp_path, policies):
    files = selinux.parts(policies["default"])
    files[f"plain/{M}.te"] = files[f"plain/{M}.te"].replace("allow confine_agent_t", "allw confine_agent_t", 1)
    write(tmp_path, files)
    need("checkmodule")
    r = subprocess.run(["checkmodule", "-M", "-m", "-o", "x.mod", f"{M}.te"], cwd=tmp_path / "plain",
                       capture_output=True, text=True)
    assert r.returncode != 0


# --- linked against a real base policy ------------------------------------------------------

def start_early(items) -> None:
    """At the end of collection (tests/conftest.py), where a selected test uses the
    linked policy and the tools are there: it is made in the background from then."""
    if any("linked" in getattr(i, "fixturenames", ()) for i in items) \
            and selinux_link.can_start(REFPOLICY):
        selinux_link.start(REPO, REFPOLICY)


def stop_early() -> None:
    selinux_link.stop()


@pytest.fixture(scope="module")
def linked(refpolicy):
    """The shipped module linked with every module of Debian's reference policy and
    expanded to a kernel policy: requires resolve, optional blocks switch on. Made in
    the background since collection ended (start_early, selinux_link.py)."""
    need(MAKEFILE), need("semodule_link"), need("semodule_expand")
    yield selinux_link.result(REPO, refpolicy)
    selinux_link.stop()


# sesearch is setools' command line: each call loads the whole expanded policy and scans
# all its rules again (1-1.5 s), so the queries go to one setools process that loads it
# once and indexes the allow rules of each source type it is asked about in one pass,
# attributes expanded on both sides: what sesearch -A -s -t -c answers (the control below
# checks that).
_QUERIES = r"""
import json, sys
import setools
policy = setools.SELinuxPolicy(sys.argv[1])
by_source = {}   # source type -> {(target type, class): perms}, one pass over the rules each


def index(src):
    out = {}
    for rule in policy.terules():
        if rule.ruletype != setools.TERuletype.allow or src not in {
                str(t) for t in rule.source.expand()}:
            continue
        for t in rule.target.expand():
            out.setdefault((str(t), str(rule.tclass)), set()).update(rule.perms)
    return out


print("ready", flush=True)
for line in sys.stdin:
    src, tgt, cls = json.loads(line)
    if src not in by_source:
        by_source[src] = index(src)
    print(json.dumps(sorted(by_source[src].get((tgt, cls), ()))), flush=True)
"""


class Rules:
    """The expanded policy, asked one (source, target, class) at a time."""

    def __init__(self, policy_bin):
        python = open(need("sesearch")).readline()[2:].strip()   # setools' own interpreter
        self.proc = subprocess.Popen([python, "-c", _QUERIES, str(policy_bin)], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout.readline().strip() == "ready"

    def allowed(self, src, tgt, cls):
        self.proc.stdin.write(json.dumps([src, tgt, cls]) + "\n")
        self.proc.stdin.flush()
        return set(json.loads(self.proc.stdout.readline()))

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def rules(linked):
    r = Rules(linked)
    yield r
    r.close()


def allowed(rules, src, tgt, cls):
    """Permissions src has on tgt:cls in the expanded policy (through attributes too)."""
    return rules.allowed(src, tgt, cls)


def test_sesearch_and_the_query_process_agree(linked, rules):
    """Control for the shared query process: the command line says the same (asked
    right after the expand, in the background: selinux_link.py)."""
    need("sesearch")
    for q, out in zip(selinux_link.SESEARCH, selinux_link.sesearch()):
        perms = set()
        for line in out.splitlines():
            body = line.split(":", 1)[1].split(None, 1)[1] if ":" in line else ""
            perms |= set(body.strip(" ;{}").split())
        assert perms == rules.allowed(*q), q


def test_linked_policy_grants_the_profile(rules):
    a = "confine_agent_t"
    for t in ("bin_t", "lib_t", "usr_t", "etc_t"):
        assert {"read", "open", "execute"} <= allowed(rules, a, t, "file"), t
    assert {"create", "write", "unlink", "rename"} <= allowed(rules, a, "confine_agent_work_t", "file")
    assert {"create", "rmdir", "add_name"} <= allowed(rules, a, "confine_agent_work_t", "dir")
    assert {"read", "open"} <= allowed(rules, a, "confine_agent_home_t", "file")
    assert "write" not in allowed(rules, a, "confine_agent_home_t", "file")
    assert {"read", "write"} <= allowed(rules, a, "null_device_t", "chr_file")
    # Types from optional blocks are switched on by the base policy's modules.
    assert "read" in allowed(rules, a, "cert_t", "file")
    assert "create" in allowed(rules, a, "user_tmp_t", "file")


def test_linked_policy_denies_the_rest(rules):
    a = "confine_agent_t"
    for t in ("shadow_t", "user_home_t", "ssh_home_t", "etc_t", "bin_t", "usr_t", "proc_t"):
        got = allowed(rules, a, t, "file")
        if t in ("shadow_t", "user_home_t", "ssh_home_t"):
            assert not (got & {"read", "open", "write"}), (t, got)
        else:
            assert not (got & {"write", "create", "unlink", "append"}), (t, got)
    assert not allowed(rules, a, a, "capability")
    assert not allowed(rules, a, a, "capability2")
    assert not allowed(rules, a, a, "tcp_socket")  # the default profile grants no port
    assert not allowed(rules, a, a, "udp_socket")
    assert not allowed(rules, a, a, "rawip_socket")
    assert not allowed(rules, a, a, "packet_socket")
    assert not allowed(rules, a, "fixed_disk_device_t", "blk_file")
    assert "ptrace" not in allowed(rules, a, "unconfined_t", "process")
    assert "signal" not in allowed(rules, a, "unconfined_t", "process")


def test_linked_policy_lets_the_launcher_enter_the_domain(rules):
    """setexeccon from unconfined_t, also after no_new_privs."""
    assert "setexec" in allowed(rules, "unconfined_t", "unconfined_t", "process")
    assert "transition" in allowed(rules, "unconfined_t", "confine_agent_t", "process")
    assert {"nnp_transition", "nosuid_transition"} <= allowed(rules, "unconfined_t",
                                                              "confine_agent_t", "process2")
    assert "entrypoint" in allowed(rules, "confine_agent_t", "bin_t", "file")
    assert "entrypoint" in allowed(rules, "confine_agent_t", "confine_agent_work_t", "file")


def test_network_profile_gets_tcp_and_dns_only(policies):
    """An agent profile reaches its hosts through confine's gateway on loopback:
    TCP, and UDP for DNS to it; never raw sockets. No network: neither."""
    te = selinux.plain_te(policies["claude-code"])
    assert "self:tcp_socket" in te and "port_type:tcp_socket name_connect" in te
    assert "self:udp_socket" in te and "rawip_socket" not in te
    assert "udp_socket" not in selinux.plain_te(policies["default"])
    assert "tcp_socket" not in selinux.plain_te(policies["default"])


def test_file_contexts(policies):
    fc = selinux.fc(policies["claude-code"], "/srv/agents/one")
    assert r"/srv/agents/one(/.*)?" in fc and "confine_agent_work_t" in fc
    assert r"HOME_DIR/\.gitconfig(/.*)?" in fc
    assert r"HOME_DIR/\.claude(/.*)?		gen_context(system_u:object_r:confine_agent_home_rw_t,s0)" in fc

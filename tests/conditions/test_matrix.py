"""The attack tests under each host condition (issue 12 item 4): the Landlock ABI
capped at 1..6, user namespaces refused by a parent seccomp filter like Docker's
default profile, and both; as root and as the unprivileged account (conftest.py
here: the conditions, what confine refuses under each today, the strict xfails).

The set: the plan refuses exactly what has no replacement, `confine check` names a
mechanism for every protection, `confine exec -- true` runs with the default
profile and no flag, `confine probe` reports every attempt blocked, and the attack
tests that prove the boundary (kernel surface, namespaces and mounts, processes
outside, network, unix sockets outside, capabilities, secrets).
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from .conftest import CONDITIONS, EXPECTED_MISSING

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "e2e"))
import test_exec_boundary as _eb  # noqa: E402
import test_unix_sockets as _us  # noqa: E402

pytestmark = pytest.mark.e2e

# the attack tests, collected again here so they run under each condition
listeners = _eb.listeners
listener = _us.listener
test_kernel_surface_denied = _eb.test_kernel_surface_denied
test_namespace_and_mount_commands = _eb.test_namespace_and_mount_commands
test_processes_outside_untouchable = _eb.test_processes_outside_untouchable
test_network_denied = _eb.test_network_denied
test_tcp_listen_without_bind = _eb.test_tcp_listen_without_bind
test_capabilities_nnp = _eb.test_capabilities_nnp
test_shadow_unreadable_by_agent = _eb.test_shadow_unreadable_by_agent
test_outside_socket_unreachable_every_route = _us.test_outside_socket_unreachable_every_route

# What a run without a pid namespace shows by design (README "Supported hosts").
NO_PID_NS_DIFFERENCES = {"secrets.proc_cmdline"}


@pytest.mark.expectations
def test_plan_refuses_exactly_what_has_no_replacement(sandbox):
    """--dry-run under the condition: the missing protections are exactly those in
    EXPECTED_MISSING (a replacement that lands must shrink it); the pid namespace's
    guarantees are never missing, replaced where there is no namespace."""
    p = sandbox.run(["true"], "--dry-run", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert {m["feature"] for m in d["missing"]} == EXPECTED_MISSING[sandbox.condition], d["missing"]
    mech = d["mechanisms"]
    no_userns, _ = CONDITIONS[sandbox.condition]
    if no_userns:
        assert "subreaper" in mech["pid_namespace.lifetime"], mech
        assert mech["pid_namespace.visibility"].startswith("PARTIAL"), mech
        assert any("no pid namespace" in n for n in d["notes"]), d["notes"]
    else:
        assert mech["pid_namespace.lifetime"].startswith("pid namespace"), mech


@pytest.mark.expectations
def test_check_names_each_protection(sandbox):
    """`confine check --json` under the condition: every protection of every
    profile has a status and a mechanism; the default profile's refused ones are
    the plan's missing ones (the same judgement)."""
    p = sandbox.confine("check", "--json")
    d = json.loads(p.stdout)
    assert p.returncode == (0 if all(x["enforceable"] for x in d["profiles"]) else 1), p.stderr
    for prof in d["profiles"]:
        for pr in prof["protections"]:
            assert pr["status"] in ("primary", "replacement", "partial", "refused", "not needed")
            assert pr["mechanism"], pr
    default = next(x for x in d["profiles"] if x["profile"] == "default")
    refused = {pr["protection"] for pr in default["protections"] if pr["status"] == "refused"}
    assert refused == EXPECTED_MISSING[sandbox.condition], default["protections"]


def test_default_profile_runs_with_no_flag(sandbox):
    p = sandbox.run(["true"])
    assert p.returncode == 0, p.stderr
    assert "degraded" not in p.stderr, p.stderr


def test_probe_reports_every_attempt_blocked(sandbox, planted_home):
    p = sandbox.confine("probe", "-w", sandbox.workdir, "--json", timeout=120)
    r = json.loads(p.stdout) if p.stdout.strip().startswith("{") else None
    assert r is not None, (p.returncode, p.stderr)
    assert all(s["ok"] for s in r["sanity"]), r["sanity"]
    allowed = NO_PID_NS_DIFFERENCES if CONDITIONS[sandbox.condition][0] else set()
    possible = [a["id"] for a in r["attempts"] if a["result"] == "possible"
                and a["id"] not in allowed]
    assert possible == [], possible
    assert r["counts"]["error"] == 0, [a for a in r["attempts"] if a["result"] == "error"]
    # the report names what replaces a missing primary (the plan's mechanisms)
    for name, how in r["mechanisms"].items():
        if name.startswith("landlock.") and "replaces" in how:
            assert f"{name}: {how}" in sandbox.confine("probe", "-w", sandbox.workdir).stdout
            break

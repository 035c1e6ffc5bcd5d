"""Kubernetes: the manifest is a Pod and a NetworkPolicy with the hardening
the policy implies, and only fields the Kubernetes API knows (a typo would be
dropped silently by a lenient client, or rejected by a strict one)."""
from __future__ import annotations

import pytest
import yaml

from confine.errors import ConfineError
from confine.export import k8s

from .conftest import BUILTIN

# Field names of the Kubernetes v1 API objects the manifest uses.
KNOWN = {
    "pod": {"apiVersion", "kind", "metadata", "spec"},
    "metadata": {"name", "namespace", "labels", "annotations"},
    "podspec": {"automountServiceAccountToken", "enableServiceLinks", "hostNetwork", "hostPID",
                "hostIPC", "securityContext", "initContainers", "containers", "volumes"},
    "podsecctx": {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "supplementalGroups",
                  "seccompProfile", "appArmorProfile"},
    "container": {"name", "image", "command", "workingDir", "env", "securityContext",
                  "volumeMounts"},
    "secctx": {"allowPrivilegeEscalation", "privileged", "readOnlyRootFilesystem", "runAsNonRoot",
               "runAsUser", "runAsGroup", "capabilities", "seccompProfile", "appArmorProfile"},
    "mount": {"name", "mountPath", "subPath", "readOnly"},
    "netpolspec": {"podSelector", "policyTypes", "ingress", "egress"},
}


def docs(policy, **kw):
    args = dict(name="agent", image="example/agent:1", argv=["claude", "-p", "hi"],
                workdir="/workspace", uid=1000, seccomp_profile="confine/p.json")
    args.update(kw)
    return list(yaml.safe_load_all(k8s.manifest(policy, **args)))


@pytest.mark.parametrize("name", BUILTIN)
def test_pod(policies, name):
    pod, netpol = docs(policies[name])
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert set(pod) <= KNOWN["pod"] and set(pod["metadata"]) <= KNOWN["metadata"]
    spec = pod["spec"]
    assert set(spec) <= KNOWN["podspec"] and set(spec["securityContext"]) <= KNOWN["podsecctx"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    [c] = spec["containers"]
    assert set(c) <= KNOWN["container"]
    sc = c["securityContext"]
    assert set(sc) <= KNOWN["secctx"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 1000
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "Localhost", "localhostProfile": "confine/p.json"}
    aa = f"confine-{name}"
    assert sc["appArmorProfile"] == {"type": "Localhost", "localhostProfile": aa}
    assert pod["metadata"]["annotations"] == {
        "container.apparmor.security.beta.kubernetes.io/agent": f"localhost/{aa}"}
    # One writable volume: every mount of the agent is a subpath of it.
    assert [v["name"] for v in spec["volumes"]] == ["work"]
    mounts = c["volumeMounts"]
    assert all(set(m) <= KNOWN["mount"] and m["name"] == "work" for m in mounts)
    assert {"name": "work", "mountPath": "/workspace", "subPath": "work"} in mounts
    assert c["workingDir"] == "/workspace" and c["command"] == ["claude", "-p", "hi"]
    tmpdir = {e["name"]: e["value"] for e in c["env"]}["TMPDIR"]
    assert {"name": "work", "mountPath": tmpdir, "subPath": "tmp"} in mounts
    [init] = spec["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    for m in mounts:  # each subpath exists before the agent's container starts
        assert f"/volume/{m['subPath']}" in init["command"][2]


def test_network_policy(policies):
    _, np = docs(policies["default"])
    assert (np["apiVersion"], np["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    assert set(np["spec"]) <= KNOWN["netpolspec"]
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert np["spec"]["egress"] == [] and np["spec"]["ingress"] == []
    pod, _ = docs(policies["default"])
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    _, np = docs(policies["claude-code"])
    [rule] = np["spec"]["egress"]
    # claude-code's hosts are names (the gateway's job): the policy can only say their
    # ports, 443 (every entry's) and DNS, TCP and UDP
    assert sorted((p["protocol"], p["port"]) for p in rule["ports"]) == [
        ("TCP", 53), ("TCP", 443), ("UDP", 53)]
    assert rule["to"][0]["ipBlock"] == {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}


def test_home_write_grants_are_subpaths(policies):
    pod, _ = docs(policies["claude-code"], home="/home/agent")
    mounts = {m["mountPath"]: m["subPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/home/agent/.claude"] == "home/.claude"
    init = pod["spec"]["initContainers"][0]["command"][2]
    assert "touch /volume/home/.claude.json" in init  # a file, not a directory


def test_gateway_note_and_bad_input(policies):
    text = k8s.manifest(policies["claude-code"], name="agent", image="x", argv=[],
                        workdir="/workspace", uid=1000, seccomp_profile="p.json")
    assert "sidecar" in text and "host-name allow-list" in text
    with pytest.raises(ConfineError):
        k8s.manifest(policies["default"], name="Bad_Name", image="x", argv=[],
                     workdir="/workspace", uid=1000, seccomp_profile="p.json")
    with pytest.raises(ConfineError):
        k8s.manifest(policies["default"], name="agent", image="x", argv=[],
                     workdir="/workspace", uid=0, seccomp_profile="p.json")

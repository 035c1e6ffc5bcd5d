"""Kubernetes: a Pod and its egress NetworkPolicy from the same Policy.

The pod runs the agent as a non-root user with no capabilities, no privilege
escalation, a read-only root filesystem, confine's seccomp profile (from
`confine export oci-seccomp`, installed on each node) and its AppArmor
profile. One volume is writable: its `work` subpath is the workdir, its `tmp`
subpath the private temp dir, and every other path the policy writes (e.g.
~/.claude) is another subpath of it, created by an init container. A state
root (~/.claude) is mounted as a write grant: a volume mount cannot protect
names inside it, so `confine exec` inside the pod protects its run-later names
(the manifest says so). No service-account token is mounted.

NetworkPolicy filters pods by IP and port, never by host name, and applies to
the whole pod: the TCP ports the profile grants go to any address except the
cloud metadata service. A host-name allow-list needs confine's egress gateway
as a sidecar, with the agent's own traffic limited to the gateway (see the
note emitted with the manifest and docs/export.md).
"""
from __future__ import annotations

import posixpath
import re
from typing import Any

import yaml

from ..errors import ConfineError
from ..policy.model import Policy
from . import apparmor, source

METADATA_V4 = "169.254.169.254/32"
# Matches @{CONFINE_TMP} (/tmp/confine-*) of the AppArmor agent profile.
TMPDIR = "/tmp/confine-pod"
GATEWAY_NOTE = """\
# Host names: NetworkPolicy allows addresses and ports, not names, and covers
# every container of the pod alike. For a host-name allow-list run confine's
# egress gateway as a sidecar container of this pod, point the agent at it
# (HTTPS_PROXY=http://127.0.0.1:PORT), and keep the agent's own sockets on
# the pod's loopback: run the agent under `confine exec` with a profile whose
# network.connect_tcp is only the gateway's port (Landlock works inside the
# container: the seccomp profile allows it). The gateway then decides by name;
# this NetworkPolicy stays the outer bound for the pod as a whole.
"""


def _name_ok(name: str) -> str:
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
        raise ConfineError(f"--name {name!r}: not a Kubernetes name (lowercase letters, digits, '-')")
    return name


FILE_SUFFIXES = (".json", ".toml", ".yaml", ".yml", ".conf", ".cfg", ".ini", ".txt", ".db")


def _writable(policy: Policy, workdir: str, home: str) -> list[tuple[str, str, bool]]:
    """(mount path, subpath of the volume, is a file) for each path the policy writes."""
    out = [(workdir, "work", False), (TMPDIR, "tmp", False)]
    for g in source.writes(policy):
        s = source.spot(g.template)
        if s.root == "home" and s.rest:
            path, sub = home + s.rest, "home" + s.rest
        elif s.root is None and s.rest != "/dev/shm":  # /dev/shm is a writable tmpfs already
            path, sub = s.rest, "root" + s.rest
        else:
            continue
        out.append((path, sub, sub.endswith(FILE_SUFFIXES)))
    return out


def _init_container(image: str, writable, secctx: dict) -> dict:
    """Creates each subpath first: kubelet would create a missing one as a
    directory, and a file such as ~/.claude.json must stay a file. It runs a
    fixed script, outside the agent's AppArmor and seccomp profiles."""
    dirs = [f"/volume/{sub}" for _, sub, is_file in writable if not is_file]
    dirs += [posixpath.dirname(f"/volume/{sub}") for _, sub, is_file in writable if is_file]
    files = [f"/volume/{sub}" for _, sub, is_file in writable if is_file]
    script = "mkdir -p " + " ".join(sorted(set(dirs)))
    if files:
        script += " && touch " + " ".join(files)
    ctx = dict(secctx, seccompProfile={"type": "RuntimeDefault"},
               appArmorProfile={"type": "RuntimeDefault"})
    return {"name": "prepare-volume", "image": image, "command": ["sh", "-c", script],
            "securityContext": ctx, "volumeMounts": [{"name": "work", "mountPath": "/volume"}]}


def manifest(policy: Policy, *, name: str, image: str, argv: list[str], workdir: str,
             uid: int, seccomp_profile: str, apparmor_profile: str | None = None,
             home: str = "/home/agent", namespace: str | None = None,
             command: str = "confine export k8s") -> str:
    _name_ok(name)
    if uid <= 0:
        raise ConfineError("--uid must be a non-root user id")
    aa = apparmor_profile or apparmor.profile_name(policy)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "confine-agent"}
    meta = {"name": name, "labels": labels}
    if namespace:
        meta["namespace"] = namespace
    secctx = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "Localhost", "localhostProfile": seccomp_profile},
        "appArmorProfile": {"type": "Localhost", "localhostProfile": aa},
    }
    env = [{"name": "HOME", "value": home}, {"name": "TMPDIR", "value": TMPDIR}]
    env += [{"name": k, "value": v} for k, v in policy.env.set]
    container = {"name": "agent", "image": image}
    if argv:
        container["command"] = list(argv)
    writable = _writable(policy, workdir, home)
    container.update({"workingDir": workdir, "env": env, "securityContext": secctx,
                      "volumeMounts": [{"name": "work", "mountPath": path, "subPath": sub}
                                       for path, sub, _ in writable]})
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": dict(meta, annotations={
            # Kubernetes < 1.30 reads the profile from this annotation only.
            "container.apparmor.security.beta.kubernetes.io/agent": f"localhost/{aa}"}),
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostNetwork": False, "hostPID": False, "hostIPC": False,
            "securityContext": {
                "runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
                "supplementalGroups": [],
                "seccompProfile": {"type": "Localhost", "localhostProfile": seccomp_profile},
            },
            "initContainers": [_init_container(image, writable, secctx)],
            "containers": [container],
            "volumes": [{"name": "work", "emptyDir": {}}],
        },
    }
    netpol = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": dict(meta, name=f"{name}-egress"),
        "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress", "Egress"],
                 "ingress": [], "egress": []},
    }
    out_ports = source.outbound_ports(policy)
    if out_ports is None or out_ports:
        # NetworkPolicy filters ports, not names: the allow list's ports for the
        # pod as a whole (GATEWAY_NOTE: the names are the gateway's job).
        rule: dict[str, Any] = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [METADATA_V4]}},
                                       {"ipBlock": {"cidr": "::/0"}}]}
        if out_ports is not None:
            rule["ports"] = ([{"protocol": "TCP", "port": p} for p in out_ports]
                             + ([{"protocol": "UDP", "port": 53}] if 53 in out_ports
                                and policy.network.egress else []))
        netpol["spec"]["egress"] = [rule]
    if policy.network.bind_tcp:
        netpol["spec"]["ingress"] = [{"ports": [{"protocol": "TCP", "port": p}
                                                for p in policy.network.bind_tcp]}]
    head = (f"# Generated by `{command}` from the confine profile {policy.name!r}.\n"
            f"# Nodes need the seccomp profile at <kubelet root>/seccomp/{seccomp_profile}\n"
            f"# (confine export oci-seccomp -p {policy.name}) and the AppArmor profile {aa}\n"
            f"# loaded (confine export apparmor -p {policy.name} -w {workdir}).\n"
            "# The volume `work` is the only writable storage.\n"
            + "".join(f"# {r.template} (a state root) is writable as a whole here: the AppArmor\n"
                      "# profile and `confine exec` inside keep its run-later names read-only: "
                      + ", ".join(r.own) + "\n" for r in source.state_roots(policy))
            + GATEWAY_NOTE)
    return head + yaml.dump_all([pod, netpol], Dumper=_Dumper, sort_keys=False,
                                default_flow_style=False)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # no &id001 anchors: manifests are read by people
        return True


def check_workdir(workdir: str) -> str:
    if not workdir.startswith("/") or posixpath.normpath(workdir) in ("/", "/tmp"):
        raise ConfineError(f"workdir {workdir!r}: an absolute path other than / and /tmp")
    return posixpath.normpath(workdir)

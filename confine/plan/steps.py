"""The child's steps for a plan, in the order the child runs them.

This is the only list of the child's order: runtime/child.py has one function
per name below and runs exactly `plan.steps`; --dry-run prints the same list.
Order matters and is explained where it is not obvious:
  * limits come before the namespaces: RLIMIT_NPROC counts the agent uid's
    tasks on the host, which only the host's /proc shows;
  * the mount and pid namespaces come before the identity switch (making them
    needs the capabilities the switch drops);
  * the cgroup step comes right before the pid namespace, the first step that
    forks: the child is born in the run's cgroup (clone3 CLONE_INTO_CGROUP)
    where the launcher has one thread, else the supervisor moves it there
    meanwhile; either way the child goes no further until it is there;
  * the LSM requests come after the switch and before no_new_privs (which
    blocks most AppArmor transitions) and Landlock (which makes /proc/self/attr
    unwritable);
  * session_keyring comes after the identity switch (the agent's uid owns the
    new keyring) and before seccomp (which denies keyctl);
  * seccomp comes last so the steps above are not blocked by it; the broker
    is forked after Landlock (it lives in the agent's domain) and before the
    notifying filter (it must not be subject to its own mediation).
  * the notifying filter's listener exists only once it is loaded, after the
    identity switch: the child passes it (and, earlier, the gateway's sockets)
    over a socketpair made before the fork, since taking it with pidfd_getfd
    would need ptrace rights over the agent's uid (root in a container has none).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..kernel import landlock, seccomp
from ..record import dataclass, field

if TYPE_CHECKING:
    from .compile import Plan


@dataclass(frozen=True)
class Step:
    """One thing the child does between fork and exec. `params` is for people
    and machines reading the plan; the step's function reads the Plan itself."""
    name: str
    does: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "does": self.does, **dict(self.params)}


def child_steps(plan: Plan) -> list[Step]:
    ident = plan.identity
    out = [
        Step("pdeathsig", "SIGKILL when the supervisor dies (parent checked for the race)"),
        Step("signals", "default dispositions and an empty mask for the agent"),
        Step("close_fds", "close every inherited descriptor except 0, 1, 2"),
    ]
    cg_step = None
    if plan.cgroup:
        cg_step = Step("cgroup", "in the run's own cgroup (born there, or moved there by the "
                       "supervisor while the steps above run; checked here, before anything "
                       "forks): "
                       "killed as a whole when the run ends"
                       + (", limits " + ", ".join(k for k, v in plan.limits.items()
                                                  if v.startswith("cgroup"))
                          if any(v.startswith("cgroup") for v in plan.limits.values())
                          else ""), {"under": plan.cgroup})
    rl = {k: v for k, v in plan.limits.items() if v.startswith("RLIMIT")}
    if rl:
        out.append(Step("limits", "resource limits by setrlimit (before the namespaces: "
                        "RLIMIT_NPROC counts the uid's tasks on the host)", {"rlimits": rl}))
    if plan.mount_ns:
        out += [
            Step("mount_namespace", "private mount namespace"
                 + ("" if ident.started_as_root else " (inside a new user namespace)"),
                 {"user_namespace": not ident.started_as_root}),
        ]
        if plan.net_ns:
            out.append(Step("net_namespace", "private network namespace: nothing of the host's "
                            "network, sockets or tables " + (
                                "(only its loopback: the egress gateway is the way out)"
                                if plan.gateway_ports else "(the profile grants no TCP port)")))
        if plan.net_ns and plan.gateway_ports:
            out.append(Step("gateway_sockets", "loopback up; the egress gateway's listening "
                            "sockets made in this namespace and handed to the supervisor",
                            {"ports": list(plan.gateway_ports)}))
        out += [
            Step("readonly_host", "every mount read-only, nosuid, nodev, except the writable "
                 "paths", {"writable": plan.writable_paths()}),
        ]
        if plan.file_binds:
            out.append(Step("file_binds", "agents' login files covered by their placeholder "
                            "copies (credentials/logins.py)",
                            {"binds": [{"copy": c, "over": t} for c, t in plan.file_binds]}))
        if plan.protected is not None:
            d = plan.protected.description
            out.append(Step("protected_binds", "protected workdir paths bound read-only "
                            "(identity of each checked against the snapshot)",
                            {"read_only": list(d.get("read_only_binds", ())),
                             "pinned": list(d.get("pinned", ())),
                             "through": list(d.get("bases", ())),
                             "roots": [r["path"] for r in d.get("roots", ())]}))
        out.append(Step("private_dev", "private /dev/shm and /dev/pts",
                        {"private": ["/dev/shm", "/dev/pts"],
                         "shm_size": plan.policy.limits.shm_size or "50%"}))
    if cg_step is not None:
        out.append(cg_step)
    if plan.pid_ns:
        out.append(Step("pid_namespace", "own pid namespace and /proc; a relay outside passes "
                        "signals and the exit status; pid 1 stays as the namespace's init"))
        out.append(Step("proc_masks", "/proc/keys of the new /proc covered by an empty "
                        "read-only file (the user's own keys are listed there by name)",
                        {"masked": ["/proc/keys"]}))
    if plan.child_rules:
        out.append(Step("landlock_new_mounts", "grant the policy's rights again on the new "
                        "mounts", {"rules": [{"path": p, "access": landlock.names(a)}
                                             for p, a in plan.child_rules]}))
    out.append(Step("chdir", "enter the workdir", {"path": plan.policy.workdir}))
    if ident.switch:
        out.append(Step("identity", "supplementary groups dropped, gid and uid switched",
                        {"uid": ident.uid, "gid": ident.gid, "user": ident.user}))
    out.append(Step("capabilities", "bounding, ambient, inheritable, permitted and effective "
                    "sets emptied" + ("; securebits locked"
                                      if ident.started_as_root or plan.mount_ns else ""),
                    {"privileged": ident.started_as_root or plan.mount_ns}))
    out.append(Step("session_keyring", "join a new, empty session keyring: nothing of the "
                    "launcher's keys (nor their names in /proc/keys)"))
    if plan.lsm.apparmor:
        out.append(Step("apparmor", "enter the AppArmor profile at exec",
                        {"profile": plan.lsm.apparmor}))
    if plan.lsm.selinux:
        out.append(Step("selinux", "enter the SELinux context at exec",
                        {"context": plan.lsm.selinux}))
    out += [
        Step("no_core_dumps", "RLIMIT_CORE 0"),
        Step("no_new_privs", "no_new_privs: exec can never gain privileges"),
    ]
    if plan.abi > 0:
        out.append(Step("landlock", "restrict_self with the rules listed under landlock",
                        {"abi": plan.abi, "rules": len(plan.path_rules),
                         "tcp_ports": len(plan.port_rules)}))
    if plan.unix_mediation:
        out.append(Step("broker", "fork the broker inside the agent's Landlock domain: it "
                        "performs mediated calls the supervisor approved"))
    if not any(m.feature == "seccomp" for m in plan.missing):
        filters = [r for r in (plan.seccomp_rules, plan.seccomp_extra) if r]
        out.append(Step("seccomp", "load the deny filters (a foreign architecture kills the "
                        "process)" + ("; the ioctl allowlist" if plan.ioctl_allowlist else ""),
                        {"filters": len(filters) + plan.ioctl_allowlist,
                         "rules": sum(len(r) for r in filters)}))
    if plan.unix_mediation:
        calls = list(seccomp.SOCKET_CALLS)
        if plan.file_mediation:
            calls += list(seccomp.OPEN_CALLS) + list(seccomp.FILE_CALLS)
        if plan.signal_mediation:
            calls += ["kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
                      "pidfd_send_signal", "fcntl(F_SETOWN)"]
        if plan.meta_mediation:
            calls += list(seccomp.META_CALLS)
        if plan.dgram_notify:
            calls += ["socket(AF_INET/AF_INET6, SOCK_DGRAM): refused, said once"]
        out.append(Step("seccomp_notify", "load the notifying filter and hand its listener to "
                        "the supervisor (SCM_RIGHTS, sent by a thread started before the "
                        "filter)", {"calls": calls}))
    if plan.pid_ns:
        out.append(Step("fork_agent", "pid 1 starts the agent (posix_spawn, at the exec step) "
                        "and stays as init: reaps, forwards signals, and takes every agent "
                        "process with it"))
    out.append(Step("exec", "environment replaced by the plan's; exec the command",
                    {"argv": list(plan.argv), "environment": sorted(plan.env)}))
    return out

"""The one table of protections a policy may need and this host may lack.

Each feature has a name (what --degrade and `confine check` accept and print),
the Landlock ABI it needs (None: not a Landlock feature) and what it protects.
The planner turns every unmet feature into a `Missing`; the runtime refuses to
run while any is left, unless the caller accepted it by name.
"""
from __future__ import annotations

from ..record import dataclass


@dataclass(frozen=True)
class Feature:
    name: str
    min_abi: int | None
    protects: str


FEATURES: tuple[Feature, ...] = (
    Feature("landlock", 1, "Landlock filesystem rules (writes only under the workdir, "
            "secrets unreadable)"),
    Feature("landlock.truncate", 3, "Landlock TRUNCATE: truncating files outside the workdir"),
    Feature("landlock.net_tcp", 4, "Landlock TCP rights: outbound and listening TCP"),
    Feature("landlock.ioctl_dev", 5, "Landlock IOCTL_DEV: ioctls on devices"),
    Feature("landlock.scope_signal", 6, "Landlock signal scoping: kill() of processes outside "
            "the sandbox"),
    Feature("landlock.scope_abstract_unix", 6, "Landlock abstract unix socket scoping"),
    Feature("seccomp", None, "seccomp filters (mount, partition, raw-device and kernel "
            "attack-surface syscalls denied)"),
    Feature("seccomp_notify", None, "seccomp user notification (refuses new protected workdir "
            "names while the agent runs; mediates listen() on unbound TCP sockets and pathname "
            "unix sockets)"),
    Feature("mount_namespace", None, "private mount namespace: every mount_namespace.* "
            "guarantee below by its primary mechanism (accepting this name with --degrade "
            "accepts all of them)"),
    # The guarantees of the private mount namespace, each with a replacement
    # (REPLACEMENTS) for hosts where the namespace cannot be made (containers,
    # Ubuntu's user-namespace restriction, confine inside confine).
    Feature("mount_namespace.read_only_host", None, "read-only host view: chmod, chown, utime "
            "and extended attributes of files outside the writable paths refused"),
    Feature("mount_namespace.private_shm", None, "private /dev/shm: no POSIX shared memory or "
            "semaphore of the user's other processes reachable"),
    Feature("mount_namespace.private_pts", None, "private /dev/pts: no other terminal of the "
            "user reachable"),
    Feature("mount_namespace.protected_paths", None, "protected workdir paths (.git/hooks, "
            ".git/config, .envrc, ...) bound read-only"),
    Feature("pid_namespace.lifetime", None, "every agent process ends with the run (setsid, "
            "double fork and daemons included)"),
    Feature("pid_namespace.visibility", None, "no view of processes outside the run (their "
            "pids, command lines, environment, memory, descriptors)"),
    Feature("outer_mediator", None, "no outer seccomp mediator performs this run's file calls: "
            "inside another confine run the outer supervisor's broker opens, creates and renames "
            "files for every process of its run in the OUTER Landlock domain, so this run's "
            "Landlock rules would not hold for those calls"),
    Feature("apparmor", None, "the AppArmor profile named by --apparmor"),
    Feature("selinux", None, "the SELinux context named by --selinux-context"),
)

# Where the primary mechanism is missing, another layer confine already has may
# give the same guarantee: feature -> (mechanism, why it is equivalent). The
# planner uses one only when its condition holds on this host and for this
# policy (compile.missing_features), and says so in --dry-run and `confine check`.
REPLACEMENTS: dict[str, tuple[str, str]] = {
    "landlock.scope_signal": (
        "pid namespace", "the agent can name no process outside its own pid namespace, so it "
        "cannot signal one"),
    "landlock.scope_abstract_unix": (
        "network namespace", "abstract unix sockets live in a network namespace, and the "
        "agent's has none but its own (used only when the profile grants no TCP port)"),
    "landlock.ioctl_dev": (
        "nodev host view", "every mount of the agent's view is nodev except binds of the "
        "profile's `devices`, so no other device node can be opened, and no ioctl reaches "
        "its driver (stricter than Landlock: reading such a node fails too)"),
    "landlock.net_tcp": (
        "mediated connects in an own network namespace", "every IPv4/IPv6 connect and send "
        "with an address is notified and routed by the supervisor to the gateway or the "
        "agent's own loopback (nothing else); a bind reaches only the agent's own network "
        "namespace, which holds its loopback alone (profiles whose hosts go through the "
        "gateway, with namespaces and seccomp user notification)"),
    "landlock.truncate": (
        "read-only host view", "every mount but the writable paths is read-only, so truncate "
        "fails with EROFS outside them (used only when no secret lies under a write grant)"),
    "mount_namespace.read_only_host": (
        "broker mediation", "chmod, chown, utime and xattr calls (path and descriptor forms) are "
        "notified and performed by the broker on the very file it judged against the writable "
        "paths; other names of a hard-linked file, file-attribute ioctls and file_setattr are "
        "refused (needs seccomp user notification)"),
    "mount_namespace.private_shm": (
        "no /dev/shm grant", "Landlock grants nothing in the shared /dev/shm: POSIX shared "
        "memory and semaphores (shm_open, sem_open) are refused with EACCES"),
    "mount_namespace.private_pts": (
        "Landlock device rules", "in the host's /dev/pts only the agent's own terminal is "
        "granted (so new pseudo-terminals cannot be opened either: their other end lies in "
        "the same /dev/pts, EACCES)"),
    "mount_namespace.protected_paths": (
        "name guard", "writes, chmod/chown/utime/xattr changes and new protected names are "
        "refused by the broker while the agent runs; deleting or renaming one away is reverted "
        "by the exit check (needs seccomp user notification)"),
}

# Where the namespaces that replace a Landlock right are missing too (a container
# on a kernel before Landlock ABI 6), seccomp and the broker give the guarantee:
# feature -> (mechanism, why it is equivalent). compile._replacement uses one only
# where seccomp (and user notification, where it says so) is there.
NO_NS_REPLACEMENTS: dict[str, tuple[str, str]] = {
    "landlock.ioctl_dev": (
        "seccomp ioctl allowlist", "only generic, terminal and socket-query ioctl requests "
        "pass, on every descriptor; any other request is refused (EACCES), regular files "
        "included (stricter than Landlock)"),
    "landlock.truncate": (
        "broker mediation", "truncate(2) and opens with O_TRUNC are notified and performed by "
        "the broker on the very file it judged against the writable paths (EROFS outside); "
        "ftruncate needs a descriptor opened for writing, which Landlock grants only there "
        "(needs seccomp user notification)"),
    "landlock.scope_signal": (
        "mediated signals", "kill, tkill, tgkill, rt_(tg)sigqueueinfo, pidfd_send_signal and "
        "fcntl F_SETOWN are notified: a process may signal itself, any other target must be a "
        "process of the run, checked and signalled by the supervisor through its own pidfd "
        "(the sender shown is the supervisor); F_SETOWN_EX and SIGIO to other processes are "
        "refused (needs seccomp user notification)"),
    "landlock.scope_abstract_unix": (
        "abstract sockets refused", "every connect and send to an abstract unix address is "
        "notified and refused (EPERM), the run's own included: a named difference (needs "
        "seccomp user notification)"),
}

# The pid namespace's guarantees where it is missing (no user namespaces: containers,
# Ubuntu's restriction, confine inside confine). They never refuse a run: lifetime has
# a full replacement; visibility has a partial one and the rest is a named difference
# (docs/security-model.md "Supported hosts": /proc/PID/cmdline and status are world-readable by the
# kernel's design, only hidepid on a private /proc or a pid namespace hides them).
PID_REPLACEMENTS: dict[str, tuple[str, str]] = {
    "pid_namespace.lifetime": (
        "child subreaper and the descendant walk", "an orphan is re-parented to the "
        "supervisor whatever it does (setsid, double fork), so the walk at exit finds, "
        "freezes and kills every process of the run (after cgroup.kill where the run has "
        "a cgroup)"),
    "pid_namespace.visibility": (
        "PARTIAL: Landlock's ptrace restriction", "the environment, memory, maps, executable "
        "and descriptors of processes outside the run are refused (PTRACE_MODE_READ checks "
        "the Landlock domain); their pids, command lines and status stay readable in /proc "
        "(a named difference, not refused)"),
}

# The parts of the mount namespace, in the order they are shown.
MOUNT_PARTS: tuple[str, ...] = ("mount_namespace.read_only_host", "mount_namespace.private_shm",
                                "mount_namespace.private_pts", "mount_namespace.protected_paths")

BY_NAME: dict[str, Feature] = {f.name: f for f in FEATURES}
NAMES: frozenset[str] = frozenset(BY_NAME)


def get(name: str) -> Feature:
    return BY_NAME[name]

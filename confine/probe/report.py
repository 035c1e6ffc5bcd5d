"""The probe's blast-radius report: a verdict, then a table (or --json).

Result words: "possible" (the attempt worked: the agent can do this),
"blocked" (it failed, and `mechanism` says which layer stopped it),
"skipped" (nothing to attack on this host, e.g. no docker socket), "error"
(the battery could not decide; counts against the verdict).
"""
from __future__ import annotations

GROUPS = (
    ("writes", "writes outside the workdir"),
    ("secrets", "secrets"),
    ("devices", "disks and devices"),
    ("mounts", "mounts and namespaces"),
    ("kernel", "kernel attack surface"),
    ("privilege", "privilege regain"),
    ("processes", "other processes"),
    ("terminal", "terminal injection"),
    ("daemons", "host daemons"),
    ("network", "network"),
    ("later", "files that run later"),
)
GROUP_TITLES = dict(GROUPS)

_NO_WRITE = ("remove the write grant that covers it (profile filesystem.write, --write): "
             "Landlock allows writes only under granted paths")
_SECCOMP = "keep the default seccomp denial ({}) - do not list it in seccomp.unsafe_allow"
_LATER = ("keep it in the profile's protected: list (no !pattern) and run with seccomp user "
          "notification, which refuses new protected names while the agent runs; review it "
          "before running git, direnv or the editor")
_UNIX = ("refuse pathname unix sockets outside the workdir: Landlock ABI 9 RESOLVE_UNIX or "
         "seccomp user-notification mediation; do not list it in unix_sockets.allow")

FIXES = {
    "writes.direct": _NO_WRITE,
    "writes.create": _NO_WRITE,
    "writes.tmp": "do not grant /tmp; the agent gets a private TMPDIR",
    "writes.home": "do not grant write on HOME or its start-up files",
    "writes.symlink": _NO_WRITE,
    "writes.hardlink": "needs Landlock ABI >= 2 (REFER) and no write grant outside the workdir",
    "writes.rename_out": "needs Landlock ABI >= 2 (REFER) and no write grant outside the workdir",
    "writes.rename_in": "needs Landlock ABI >= 2 (REFER) and no write grant outside the workdir",
    "writes.truncate": "needs Landlock ABI >= 3 (TRUNCATE) and no write grant outside the workdir",
    "writes.open_trunc": "needs Landlock ABI >= 3 (TRUNCATE) and no write grant outside the workdir",
    "writes.proc_root": _NO_WRITE,
    "writes.dev_shm": ("/dev/shm is shared with every process of the user: give the agent a "
                       "private /dev/shm (mount namespace) or drop the grant if it needs no "
                       "POSIX shared memory"),
    "writes.proc_sys": "never grant write on /proc or /sys",
    "writes.chmod": ("Landlock cannot restrict chmod/chown/utime/setxattr: make the host "
                     "read-only outside the workdir in a private mount namespace"),
    "secrets.outside_file": "remove the read grant that covers it (filesystem.read, --read)",
    "secrets.credentials": ("keep credential files carved out: remove --read/--write or profile "
                            "grants on them or their directories"),
    "secrets.home_dir": "do not grant read on HOME itself; grant only the files the agent needs",
    "secrets.shadow": "keep /etc/shadow carved out of /etc (built-in secrets list)",
    "secrets.environment": ("do not pass secret-looking variables (--env NAME, profile env.pass) "
                            "unless the agent needs that one"),
    "secrets.proc_environ": "needs Landlock (its ptrace rule guards /proc/PID/environ)",
    "secrets.proc_cmdline": ("mount a /proc with hidepid=invisible (or a PID namespace) for the "
                             "agent: Landlock cannot limit /proc to the sandbox's own processes"),
    "secrets.inherited_fds": "the launcher must close every descriptor but 0, 1, 2 before exec",
    "devices.block_open": ("do not grant disk nodes (filesystem.devices); start confine as root "
                           "so the disk group is dropped"),
    "devices.dev_mem": "do not grant /dev/mem, /dev/kmem or /dev/port",
    "devices.mknod": _SECCOMP.format("device-nodes"),
    "devices.ioctl_discard": _SECCOMP.format("ioctl:BLKDISCARD, ioctl:BLKZEROOUT"),
    "devices.ioctl_partition": _SECCOMP.format("ioctl:BLKPG, ioctl:BLKRRPART"),
    "devices.ioctl_scsi": _SECCOMP.format("ioctl:SG_IO"),
    "mounts.mount": _SECCOMP.format("mounts"),
    "mounts.new_mount_api": _SECCOMP.format("mounts"),
    "mounts.chroot": _SECCOMP.format("mounts: chroot"),
    "mounts.unshare_user": _SECCOMP.format("namespaces"),
    "mounts.unshare_mount": _SECCOMP.format("namespaces"),
    "mounts.clone_newuser": _SECCOMP.format("namespaces: clone with CLONE_NEW*"),
    "mounts.clone3": _SECCOMP.format("namespaces: clone3 -> ENOSYS"),
    "mounts.setns": _SECCOMP.format("namespaces: setns"),
    "kernel.modules": _SECCOMP.format("modules"),
    "kernel.kexec": _SECCOMP.format("boot"),
    "kernel.reboot": _SECCOMP.format("boot"),
    "kernel.bpf": _SECCOMP.format("bpf"),
    "kernel.perf": _SECCOMP.format("perf"),
    "kernel.io_uring": _SECCOMP.format("io_uring"),
    "kernel.userfaultfd": _SECCOMP.format("userfaultfd"),
    "kernel.keyring": _SECCOMP.format("keyring"),
    "kernel.af_alg": _SECCOMP.format("socket:AF_ALG"),
    "kernel.personality": _SECCOMP.format("personality"),
    "kernel.syslog": _SECCOMP.format("syslog"),
    "kernel.clock": _SECCOMP.format("clock"),
    "kernel.swap": _SECCOMP.format("swap"),
    "kernel.open_by_handle": _SECCOMP.format("file-handles"),
    "kernel.raw_io": _SECCOMP.format("raw-io"),
    "kernel.compat_i386": "the seccomp filter must kill non-native architectures",
    "kernel.compat_x32": "the seccomp filter must reject x32 system call numbers",
    "privilege.no_new_privs": "run the agent under confine exec (it sets no_new_privs)",
    "privilege.capabilities": "run the agent under confine exec (it drops every capability)",
    "privilege.setuid_exec": "no_new_privs makes execve ignore setuid bits: run under confine exec",
    "processes.signal": "needs Landlock signal scoping (ABI 6; profile scope.signals: true)",
    "processes.ptrace": "needs Landlock (its ptrace rule) or a separate user for the agent",
    "processes.vm_readv": "needs Landlock (its ptrace rule) or a separate user for the agent",
    "processes.pidfd_getfd": "needs Landlock (its ptrace rule) or a separate user for the agent",
    "processes.proc_mem": "needs Landlock (its ptrace rule) or a separate user for the agent",
    "processes.proc_cwd": "needs Landlock (its ptrace rule) or a separate user for the agent",
    "terminal.tiocsti": _SECCOMP.format("ioctl:TIOCSTI") + "; or sysctl dev.tty.legacy_tiocsti=0",
    "terminal.tiocsti_high_bits": "compare ioctl requests on the low 32 bits in seccomp",
    "terminal.tioclinux": _SECCOMP.format("ioctl:TIOCLINUX"),
    "daemons.fake_socket": _UNIX,
    "daemons.socket_symlink": _UNIX + " (resolve symlinks before deciding)",
    "daemons.socket_proc_root": _UNIX + " (resolve /proc/self/root as the agent's)",
    "daemons.container_runtime": _UNIX,
    "daemons.ssh_agent": _UNIX,
    "daemons.dbus": _UNIX,
    "daemons.multiplexer": _UNIX,
    "daemons.abstract": "needs Landlock abstract-socket scoping (ABI 6; scope.abstract_unix: true)",
    "network.tcp_loopback": ("remove the port from network.connect_tcp; Landlock (ABI 4) filters "
                             "TCP by port, not by address"),
    "network.tcp_listen": "remove the port from network.bind_tcp (Landlock ABI 4)",
    "network.udp": _SECCOMP.format("socket:inet-dgram"),
    "network.dns": (_SECCOMP.format("socket:inet-dgram") + "; resolve over TCP (RES_OPTIONS=use-vc); "
                    "with the gateway, port 53 goes to confine's DNS server, which answers only "
                    "the names the profile allows"),
    "network.metadata": ("Landlock filters ports, not addresses: drop port 80 from connect_tcp, "
                         "or block 169.254.169.254 on the host"),
    "network.raw": _SECCOMP.format("socket:inet-raw, socket:AF_PACKET"),
    "network.ping": _SECCOMP.format("socket:inet-dgram"),
    "network.mptcp": _SECCOMP.format("socket:inet-stream-non-tcp"),
    "network.tcp_outside": ("name hosts in network.allow, not address ranges: an address rule "
                            "(0.0.0.0/0:PORT, a wide network) lets the gateway relay raw TCP to "
                            "every address in it; without seccomp user notification (no redirect "
                            "to the gateway) a connect_tcp port is open to every address (Landlock "
                            "filters ports, not addresses)"),
    "network.dns_outside": ("keep UDP closed (seccomp socket:inet-dgram) and let only confine's "
                            "DNS answer (network.allow: the gateway's resolver)"),
    "later.git_hooks": _LATER,
    "later.git_config": _LATER,
    "later.git_rename": _LATER + " (the parents of protected paths too)",
    "later.envrc": _LATER,
    "later.editor": _LATER,
    "later.shell_rc": _LATER,
    "later.agent_config": _LATER,
    "later.symlink_trick": _LATER,
    "later.gitfile": _LATER,
}


def build(meta: dict, data: dict | None, status: int, stderr: str, seconds: float) -> dict:
    """The report as a dict (what --json prints)."""
    if data is None:
        tail = " | ".join(stderr.strip().splitlines()[-5:]) if stderr.strip() else "no output"
        sanity = [{"id": "sanity.battery", "title": "the battery runs inside the sandbox",
                   "ok": False,
                   "detail": f"the battery produced no report (exit status {status}): {tail}"}]
        attempts: list[dict] = []
        facts: dict = {}
    else:
        sanity = data.get("sanity", [])
        attempts = data.get("attempts", [])
        facts = data.get("facts", {})
    for a in attempts:
        a["group_title"] = GROUP_TITLES.get(a["group"], a["group"])
        a["fix"] = FIXES.get(a["id"]) if a["result"] == "possible" else None
    counts = {k: sum(1 for a in attempts if a["result"] == k)
              for k in ("possible", "blocked", "skipped", "error")}
    groups = []
    for gid, title in GROUPS:
        mine = [a for a in attempts if a["group"] == gid]
        if mine:
            groups.append({"id": gid, "title": title,
                           **{k: sum(1 for a in mine if a["result"] == k) for k in counts}})
    sane = bool(sanity) and all(s["ok"] for s in sanity)
    passed = sane and counts["possible"] == 0 and counts["error"] == 0 and bool(attempts)
    tried = counts["possible"] + counts["blocked"] + counts["error"]
    if passed:
        summary = (f"nothing the battery tried is possible ({counts['blocked']} attempts "
                   f"blocked); the sandbox is usable ({len(sanity)}/{len(sanity)} sanity checks)")
    else:
        parts = []
        if counts["possible"]:
            where = ", ".join(f"{g['title']} {g['possible']}" for g in groups if g["possible"])
            parts.append(f"{counts['possible']} of {tried} attempts possible ({where})")
        if counts["error"]:
            parts.append(f"{counts['error']} inconclusive")
        bad = [s for s in sanity if not s["ok"]]
        if bad:
            parts.append("sandbox not usable: " + ", ".join(s["id"] for s in bad) + " failed")
        summary = "; ".join(parts)
    if not meta.get("confined", True):
        summary += " [UNCONFINED test run: no sandbox was applied]"
    return {
        "verdict": "pass" if passed else "fail",
        "summary": summary,
        "exit_status": 0 if passed else 1,
        **meta,
        "seconds": round(seconds, 2),
        "battery": {"exit_status": status, **facts},
        "counts": counts,
        "groups": groups,
        "sanity": sanity,
        "attempts": attempts,
        "stderr": stderr[-4000:] if (data is None or counts["error"]) else "",
    }


def _w(text: str | None, width: int) -> str:
    text = text or "-"
    return text if len(text) <= width else text[: width - 1] + "~"


def render(r: dict, verbose: bool = False) -> str:
    """Human report: the verdict first, then one table row per attempt."""
    lines = []
    verdict = "PASS" if r["verdict"] == "pass" else "FAIL"
    lines.append(f"confine probe: {verdict} - {r['summary']}")
    agent = r.get("agent", {})
    lines.append(f"  profile {r.get('profile')}, workdir {r.get('workdir')}, agent "
                 f"{agent.get('user')} (uid {agent.get('uid')}), Landlock ABI "
                 f"{r.get('landlock_abi')}, unix sockets: {r.get('unix_sockets')}, "
                 f"new protected names: {r.get('protected_names')}, {r['seconds']:.1f} s")
    for d in r.get("degraded", []):
        lines.append(f"  DEGRADED (not enforced): {d}")
    for name, how in r.get("mechanisms", {}).items():
        if "replaces" in how or how.startswith(("PARTIAL", "child subreaper", "cgroup.kill")):
            lines.append(f"  {name}: {how}")
    c = r["counts"]
    lines.append(f"  {c['possible']} possible, {c['blocked']} blocked, {c['skipped']} skipped"
                 + (f", {c['error']} inconclusive" if c["error"] else ""))
    lines.append("")
    lines.append("sanity (must work inside the sandbox)")
    for s in r["sanity"]:
        lines.append(f"  {'ok  ' if s['ok'] else 'FAIL'}  {s['title']}"
                     + ("" if s["ok"] and not verbose else f": {s['detail']}"))
    fmt = "  {:<9} {:<22} {:<13} {:<32} {}"
    for g in r["groups"]:
        lines.append("")
        lines.append(f"{g['title']}: {g['possible']} possible, {g['blocked']} blocked"
                     + (f", {g['skipped']} skipped" if g["skipped"] else "")
                     + (f", {g['error']} inconclusive" if g["error"] else ""))
        for a in (x for x in r["attempts"] if x["group"] == g["id"]):
            word = {"possible": "POSSIBLE", "blocked": "blocked", "skipped": "skipped",
                    "error": "ERROR"}[a["result"]]
            short = a["id"].split(".", 1)[1]
            lines.append(fmt.format(word, _w(short, 22), _w(a.get("seen"), 13),
                                    _w(a.get("mechanism"), 32), a["title"]).rstrip())
            if a["result"] in ("possible", "error") or (verbose and a.get("detail")):
                if a.get("detail"):
                    lines.append(f"{'':12}{a['detail']}")
            if a.get("fix"):
                lines.append(f"{'':12}fix: {a['fix']}")
    if r.get("stderr"):
        lines.append("")
        lines.append("battery stderr (last lines):")
        lines += ["  " + ln for ln in r["stderr"].strip().splitlines()[-10:]]
    lines.append("")
    lines.append("POSSIBLE: the agent can do this. blocked: the attempt failed; the column after "
                 "the errno names the layer that stopped it.")
    return "\n".join(lines)

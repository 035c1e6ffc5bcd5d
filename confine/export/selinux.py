"""SELinux: a policy module with the agent's domain, confine_agent_t.

SELinux labels files with types instead of matching paths, so the Policy's
paths are mapped to types: system locations to the base policy's types
(read and execute only), the workdir and any other writable path to
confine_agent_work_t (the only type the agent may create, change or delete
files in, apart from its private temp dir and /dev/shm), files under $HOME
that the policy lets it read to confine_agent_home_t. Everything else is
denied because nothing allows it: secrets keep their own types (shadow_t,
ssh_home_t, user_home_t for ~/.aws, ...), and there is no capability, mount,
raw socket or ptrace of other domains.

The module body is plain policy language (allow rules, require and optional
blocks), so the same text builds with the refpolicy devel Makefile
(confine_agent.te/.fc/.if) and with checkmodule/semodule_package alone
(plain/confine_agent.te/.fc), on refpolicy-based and Fedora-family policies.
Types a base policy may lack sit in optional blocks.

Entry: `confine exec --selinux-context CTX` calls setexeccon before exec, so
the agent starts in confine_agent_t whatever it runs; programs labelled
confine_agent_exec_t enter it on exec without that. confine sets
no_new_privs first, hence the nnp_transition permission.
"""
from __future__ import annotations

import re

from ..policy.model import Policy
from ..policy.patterns import compile_patterns
from . import source

MODULE = "confine_agent"
VERSION = "1.0.0"
DOMAIN = "confine_agent_t"
DEFAULT_WORKDIR = "/srv/confine"

DIR_R = "{ getattr search open read lock ioctl watch }"
FILE_R = "{ getattr open read lock ioctl map }"
FILE_RX = "{ getattr open read lock ioctl map execute execute_no_trans }"
LNK_R = "{ getattr read }"
DIR_M = ("{ create open getattr setattr read write link unlink rename search add_name "
         "remove_name reparent rmdir lock ioctl watch }")
FILE_M = ("{ create open getattr setattr read write append rename link unlink ioctl lock map "
          "execute execute_no_trans watch }")
NODE_M = "{ create open getattr setattr read write append rename link unlink ioctl lock }"
CHR_RW = "{ getattr open read write append ioctl lock map }"

# System paths the profiles read, and the types a base policy gives their contents.
USR = ("bin_t", "shell_exec_t", "lib_t", "ld_so_t", "textrel_shlib_t", "usr_t", "locale_t",
       "fonts_t", "src_t")
SYSTEM_READ = {
    "/usr": USR, "/bin": USR, "/sbin": USR, "/lib": USR, "/lib32": USR, "/lib64": USR,
    "/libx32": USR, "/opt": USR,
    "/etc": ("etc_t", "etc_runtime_t", "net_conf_t", "locale_t", "cert_t", "ld_so_cache_t"),
    "/proc": ("proc_t", "proc_net_t", "sysctl_t", "sysctl_kernel_t", "sysctl_vm_t", "sysctl_net_t"),
    "/sys/devices/system/cpu": ("sysfs_t", "cpu_online_t"),
    "/sys/fs/cgroup": ("cgroup_t",),
    "/var/lib/dpkg": ("dpkg_var_lib_t",),
    "/run/systemd/resolve": ("systemd_resolved_runtime_t", "net_conf_t"),
}
# Types that are in every refpolicy-derived base policy; all others go in optional blocks.
CORE = {"bin_t", "shell_exec_t", "lib_t", "ld_so_t", "usr_t", "etc_t", "proc_t", "sysctl_t",
        "sysfs_t", "root_t", "device_t", "null_device_t", "zero_device_t", "random_device_t",
        "urandom_device_t", "devtty_t", "devpts_t", "ptmx_t", "tmp_t", "tmpfs_t", "home_root_t",
        "user_home_dir_t", "user_home_t", "var_t", "var_lib_t", "var_run_t", "locale_t", "node_t",
        "exec_type",
        "port_type"}
DEVICES = {"/dev/null": "null_device_t", "/dev/full": "null_device_t",
           "/dev/zero": "zero_device_t", "/dev/random": "random_device_t",
           "/dev/urandom": "urandom_device_t", "/dev/tty": "devtty_t", "/dev/pts": "devpts_t",
           "/dev/ptmx": "ptmx_t"}
# Domains confine may run in when it sets the agent's context (optional: not every
# policy has them). Others: call confine_agent_run() from their module.
LAUNCHERS = ("unconfined_t", "unconfined_service_t")


def _fc_regex(path: str) -> str:
    return re.sub(r"([.+^$()\[\]{}|?*\\])", r"\\\1", path)


def _system_types(policy: Policy) -> tuple[set[str], list[str]]:
    types: set[str] = set()
    unmapped = []
    for g in policy.read:
        s = source.spot(g.template)
        if s.root is not None:
            continue
        hit = [p for p in SYSTEM_READ if s.rest == p or s.rest.startswith(p + "/")]
        if hit:
            types.update(SYSTEM_READ[max(hit, key=len)])
        else:
            unmapped.append(s.rest)
    return types, unmapped


class _Body:
    """Allow rules, split into the core (types every refpolicy-derived base has)
    and one optional block per other type, so a base policy without, say,
    dpkg_var_lib_t still links and only that rule is left out."""

    def __init__(self):
        self.core: list[str] = []
        self.optional: dict[tuple[str, ...], list[str]] = {}

    def allow(self, types, cls: str, perms: str, src: str = DOMAIN):
        types = sorted(set(types))
        core = [t for t in types if t in CORE or t.startswith("confine_agent")]
        for t in types:
            if t not in core:
                self.optional.setdefault((t,), []).append(f"allow {src} {t}:{cls} {perms};")
        if core:
            tgt = core[0] if len(core) == 1 else "{ " + " ".join(core) + " }"
            self.core.append(f"allow {src} {tgt}:{cls} {perms};")


def _requires(lines: list[str], declared: set[str]) -> list[str]:
    """The require block for these lines: every type, attribute, role, class and
    permission they name but the module does not declare (checkmodule insists)."""
    text = "\n".join(x.split("#")[0] for x in lines)
    types = sorted({t for t in re.findall(r"\b([a-z0-9_]+_t)\b", text)} - declared)
    attrs = sorted({a for a in re.findall(r"\b(exec_type|port_type|domain|file_type|"
                                          r"non_security_file_type|non_auth_file_type)\b", text)})
    roles = sorted(set(re.findall(r"\brole ([a-z_]+_r)\b", text)))
    classes: dict[str, set[str]] = {}
    allows = "\n".join(x for x in text.splitlines() if x.lstrip().startswith("allow "))
    for cls, perms in re.findall(r":([a-z0-9_]+) \{? ?([a-z0-9_ ]+?) ?\}?;", allows):
        classes.setdefault(cls, set()).update(perms.split())
    out = [f"\ttype {t};" for t in types] + [f"\tattribute {a};" for a in attrs]
    out += [f"\trole {r};" for r in roles]
    out += [f"\tclass {c} {{ {' '.join(sorted(p))} }};" for c, p in sorted(classes.items())]
    return out


def _body(policy: Policy) -> tuple[list[str], dict[tuple[str, ...], list[str]], list[str]]:
    b = _Body()
    sys_types, unmapped = _system_types(policy)
    # Reach every granted path: search (not list) the directories on the way,
    # follow symlinks (/bin -> usr/bin).
    walk = {"root_t", "home_root_t", "user_home_dir_t", "user_home_t", "var_t", "var_lib_t",
            "var_run_t", "tmp_t", "device_t"}
    b.allow(walk, "dir", "{ getattr search }")
    b.allow(sys_types, "dir", DIR_R)
    b.allow({"root_t", "var_t", "var_run_t"} | sys_types, "lnk_file", LNK_R)
    b.allow(sys_types | {"exec_type"}, "file", FILE_RX)
    b.core.append(f"allow {DOMAIN} {{ bin_t shell_exec_t lib_t usr_t exec_type "
                  f"confine_agent_exec_t confine_agent_work_t }}:file entrypoint;")
    # Files under $HOME the policy reads or writes (labelled by the .fc file).
    b.allow({"confine_agent_home_t"}, "dir", DIR_R)
    b.allow({"confine_agent_home_t"}, "file", FILE_RX)
    b.allow({"confine_agent_home_t"}, "lnk_file", LNK_R)
    # The only writable types: the workdir (and other writable paths), $HOME
    # files the policy writes, the private temp dir, /dev/shm.
    rw = {"confine_agent_work_t", "confine_agent_home_rw_t"}
    b.allow(rw, "dir", DIR_M)
    b.allow(rw, "file", FILE_M)
    for cls in ("lnk_file", "fifo_file", "sock_file"):
        b.allow(rw, cls, NODE_M)
    b.allow({"user_tmp_t"}, "dir", DIR_M)
    b.allow({"user_tmp_t"}, "file", FILE_M)
    b.allow({"user_tmp_t"}, "lnk_file", NODE_M)
    if any(source.spot(g.template) == source.Spot(None, "/dev/shm") for g in policy.write):
        b.allow({"tmpfs_t"}, "dir", DIR_M)
        b.allow({"tmpfs_t"}, "file", FILE_M)
    devs = set()
    for g in policy.devices:
        s = source.spot(g.template)
        if s.root is None and s.rest in DEVICES:
            devs.add(DEVICES[s.rest])
    if "devpts_t" in devs:
        devs.add("user_devpts_t")
        b.allow({"devpts_t"}, "dir", DIR_R)
    b.allow(devs, "chr_file", CHR_RW)
    # The process itself: its own /proc entries, pipes, local sockets, signals
    # and ptrace only within the domain, JIT memory (node, java), no capabilities.
    b.core += [
        f"allow {DOMAIN} self:process {{ fork sigchld sigkill sigstop signull signal ptrace "
        "getsched setsched getsession getpgid setpgid getcap getattr getrlimit setrlimit execmem };",
        f"allow {DOMAIN} self:dir {DIR_R};",
        f"allow {DOMAIN} self:file {{ getattr open read write ioctl lock }};",
        f"allow {DOMAIN} self:lnk_file {LNK_R};",
        f"allow {DOMAIN} self:fifo_file {{ getattr open read write append ioctl lock }};",
        f"allow {DOMAIN} self:unix_stream_socket {{ create ioctl read getattr write setattr append "
        "bind connect getopt setopt shutdown listen accept connectto };",
        f"allow {DOMAIN} self:unix_dgram_socket {{ create ioctl read getattr write setattr append "
        "bind connect getopt setopt shutdown sendto };",
        f"allow {DOMAIN} self:netlink_route_socket {{ create ioctl read getattr write setattr "
        "append bind connect getopt setopt shutdown nlmsg_read };",
        f"allow {DOMAIN} self:sem {{ create destroy getattr setattr read write associate unix_read unix_write }};",
        f"allow {DOMAIN} self:shm {{ create destroy getattr setattr read write associate unix_read unix_write lock }};",
    ]
    if policy.network.connect_tcp or policy.network.bind_tcp or policy.network.egress:
        ports = ", ".join(map(str, policy.network.connect_tcp)) or "none"
        binds = ", ".join(map(str, policy.network.bind_tcp)) or "none"
        b.core += [
            f"# TCP (connect: {ports}; bind: {binds}). SELinux port types group ports",
            "# differently on every distribution; Landlock keeps the exact list.",
            f"allow {DOMAIN} self:tcp_socket {{ create ioctl read getattr write setattr append "
            "bind connect getopt setopt shutdown listen accept };",
            f"allow {DOMAIN} node_t:tcp_socket node_bind;",
        ]
        if policy.network.connect_tcp or policy.network.egress:
            b.core.append(f"allow {DOMAIN} port_type:tcp_socket name_connect;")
        if policy.network.egress:
            b.core += ["# Other hosts by name through confine's egress gateway on loopback; DNS",
                       "# to it over UDP (the gateway decides names, SELinux cannot).",
                       f"allow {DOMAIN} self:udp_socket {{ create ioctl read getattr write "
                       "setattr append bind connect getopt setopt shutdown };",
                       f"allow {DOMAIN} port_type:udp_socket name_bind;"]
        if policy.network.bind_tcp:
            b.core.append(f"allow {DOMAIN} port_type:tcp_socket name_bind;")
    notes = [f"# Not mapped to a type (read grant, relabel it to use it): {p}" for p in unmapped]
    return b.core, b.optional, notes


def _declarations() -> list[str]:
    return [
        f"type {DOMAIN};",
        "typeattribute confine_agent_t domain;",
        "# Programs that start in the agent domain when run from a launcher domain.",
        "type confine_agent_exec_t;",
        "typeattribute confine_agent_exec_t file_type, exec_type, non_security_file_type, non_auth_file_type;",
        "# The workdir and other paths the policy writes: the only writable files.",
        "type confine_agent_work_t;",
        "typeattribute confine_agent_work_t file_type, non_security_file_type, non_auth_file_type;",
        "# Files under $HOME the policy reads (confine_agent_home_t) or writes (_rw_t).",
        "type confine_agent_home_t;",
        "typeattribute confine_agent_home_t file_type, non_security_file_type, non_auth_file_type;",
        "type confine_agent_home_rw_t;",
        "typeattribute confine_agent_home_rw_t file_type, non_security_file_type, non_auth_file_type;",
        "role system_r types confine_agent_t;",
    ]


def _launcher_block(launcher: str) -> list[str]:
    """What a domain that runs `confine exec --selinux-context` needs."""
    return [
        f"allow {launcher} self:process setexec;",
        f"allow {launcher} {DOMAIN}:process {{ transition sigchld sigkill sigstop signull signal getattr }};",
        f"allow {launcher} {DOMAIN}:process2 {{ nnp_transition nosuid_transition }};",
        f"allow {launcher} {DOMAIN}:dir {{ getattr search open read }};",
        f"allow {launcher} {DOMAIN}:file {{ getattr open read }};",
        f"allow {launcher} confine_agent_exec_t:file {{ getattr open read map execute }};",
        f"type_transition {launcher} confine_agent_exec_t:process {DOMAIN};",
        f"allow {DOMAIN} {launcher}:fd use;",
        f"allow {DOMAIN} {launcher}:fifo_file {{ getattr read write append ioctl lock }};",
        f"allow {DOMAIN} {launcher}:unix_stream_socket {{ getattr read write append ioctl }};",
        f"allow {DOMAIN} {launcher}:process sigchld;",
        f"allow {launcher} {{ confine_agent_work_t confine_agent_home_t confine_agent_home_rw_t }}"
        ":dir { relabelfrom relabelto };",
    ]


def _module(policy: Policy, plain: bool, command: str) -> str:
    core, optional, notes = _body(policy)
    declared = {DOMAIN, "confine_agent_exec_t", "confine_agent_work_t", "confine_agent_home_t",
                "confine_agent_home_rw_t"}
    decl = _declarations()
    head = ([f"module {MODULE} {VERSION};"] if plain else [f"policy_module({MODULE}, {VERSION})"])
    req = _requires(decl + core, declared)
    out = [f"# Generated by `{command}` from the confine profile {policy.name!r}.",
           "# Do not edit; regenerate instead. Deployment: docs/export.md.", *head, ""]
    out += ["require {", *req, "}", "", *decl, "", *core, *notes, ""]
    blocks = [(k, v) for k, v in sorted(optional.items())]
    blocks += [((launcher,), _launcher_block(launcher)) for launcher in LAUNCHERS]
    blocks.append((("unconfined_t",), [f"role unconfined_r types {DOMAIN};"]))
    for _, lines in blocks:
        out += ["optional {", "\trequire {", *_requires(lines, declared), "\t}",
                *[f"\t{line}" for line in lines], "}"]
    return "\n".join(out) + "\n"


def te(policy: Policy, command: str = "confine export selinux") -> str:
    return _module(policy, plain=False, command=command)


def plain_te(policy: Policy, command: str = "confine export selinux --part plain-te") -> str:
    return _module(policy, plain=True, command=command)


def _fc_lines(policy: Policy, workdir: str | None, ctx) -> list[str]:
    wd = workdir or DEFAULT_WORKDIR
    out = [f"{_fc_regex(wd)}(/.*)?\t\t{ctx('confine_agent_work_t')}"]
    grants = {"read": policy.read, "write": source.writes(policy)}
    for kind, typ in (("read", "confine_agent_home_t"), ("write", "confine_agent_home_rw_t")):
        for g in grants[kind]:
            s = source.spot(g.template)
            if s.root == "home" and s.rest:
                out.append(f"HOME_DIR{_fc_regex(s.rest)}(/.*)?\t\t{ctx(typ)}")
            elif s.root is None and kind == "write" and s.rest != "/dev/shm":
                out.append(f"{_fc_regex(s.rest)}(/.*)?\t\t{ctx('confine_agent_work_t')}")
    return out + _state_root_fc_lines(policy, ctx)


def _state_root_fc_lines(policy: Policy, ctx) -> list[str]:
    """A state root's own anchored patterns labelled read-only (the more specific
    file context wins over the root's writable one): what exists there when it
    is labelled stays unwritable, unremovable and closed to new names. What the
    agent creates later takes the root's writable type; those names, the
    patterns at any depth and the workdir's patterns in the root are protected
    by `confine exec` only, and the file says so."""
    out: list[str] = []
    for r in source.state_roots(policy):
        if r.spot.root == "home":
            base, typ = "HOME_DIR" + _fc_regex(r.spot.rest), "confine_agent_home_t"
        elif r.spot.root is None:
            base, typ = _fc_regex(r.spot.rest), "confine_agent_home_t"
        else:
            base, typ = "", ""
        own = compile_patterns(r.own)
        placed = [p for p in own if p.anchored and not p.git and base]
        rest = [t for t in r.patterns if t not in {p.text for p in placed}]
        out.append(f"# {r.template}, a state root ({r.source}): its run-later names read-only "
                   "once labelled; new ones and these are protected by confine exec only: "
                   + ", ".join(rest))
        for p in placed:
            rel = "/".join(_fc_glob(c) for c in p.comps)
            out.append(f"{base}/{rel}{'(/.*)?' if p.tree else ''}\t\t{ctx(typ)}")
    return out


def _fc_glob(comp: str) -> str:
    """One fnmatch component as a file-context regex matching the same names."""
    out, i, n = [], 0, len(comp)
    while i < n:
        c = comp[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (cls := source.bracket(comp, i)) is not None:
            body, neg, i = cls
            # members escaped: a "]" or a leading "^" is a member to fnmatch, not the
            # class's end or its negation as in a regex
            out.append("[" + ("^/" if neg else "")
                       + "".join("\\" + ch if ch in "\\]^[" else ch for ch in body) + "]")
            continue
        else:   # a "[" without its "]" too: fnmatch takes it literally
            out.append(_fc_regex(c))
        i += 1
    return "".join(out)


def fc(policy: Policy, workdir: str | None = None, command: str = "confine export selinux") -> str:
    head = [f"# Generated by `{command}`. The workdir line is an example: label each",
            "# workdir with semanage fcontext (docs/export.md)."]
    return "\n".join(head + _fc_lines(policy, workdir, lambda t: f"gen_context(system_u:object_r:{t},s0)")) + "\n"


def plain_fc(policy: Policy, workdir: str | None = None,
             command: str = "confine export selinux --part plain-fc") -> str:
    head = [f"# Generated by `{command}`. The workdir line is an example: label each",
            "# workdir with semanage fcontext (docs/export.md)."]
    return "\n".join(head + _fc_lines(policy, workdir, lambda t: f"system_u:object_r:{t}:s0")) + "\n"


def interface(command: str = "confine export selinux --part if") -> str:
    return f"""## <summary>confine: the domain AI agents run in (generated by `{command}`).</summary>

########################################
## <summary>
##	Let a domain start confine agents: set their context with setexeccon
##	(also under no_new_privs) or run confine_agent_exec_t programs.
## </summary>
## <param name="domain">
##	<summary>Domain that runs `confine exec`.</summary>
## </param>
## <param name="role">
##	<summary>Role of that domain.</summary>
## </param>
#
interface(`confine_agent_run',`
	gen_require(`
		type {DOMAIN}, confine_agent_exec_t, confine_agent_work_t;
		type confine_agent_home_t, confine_agent_home_rw_t;
	')

	role $2 types {DOMAIN};
	allow $1 self:process setexec;
	allow $1 {DOMAIN}:process {{ transition sigchld sigkill sigstop signull signal getattr }};
	allow $1 {DOMAIN}:process2 {{ nnp_transition nosuid_transition }};
	domtrans_pattern($1, confine_agent_exec_t, {DOMAIN})
	ps_process_pattern($1, {DOMAIN})
	allow {DOMAIN} $1:fd use;
	allow {DOMAIN} $1:fifo_file rw_inherited_fifo_file_perms;
	allow {DOMAIN} $1:unix_stream_socket {{ getattr read write append ioctl }};
	allow {DOMAIN} $1:process sigchld;
	allow $1 {{ confine_agent_work_t confine_agent_home_t confine_agent_home_rw_t }}:dir {{ relabelfrom relabelto }};
')

########################################
## <summary>
##	Manage the agents' workdirs (for a domain that reviews their work).
## </summary>
## <param name="domain">
##	<summary>Domain allowed access.</summary>
## </param>
#
interface(`confine_agent_manage_work',`
	gen_require(`
		type confine_agent_work_t;
	')

	manage_dirs_pattern($1, confine_agent_work_t, confine_agent_work_t)
	manage_files_pattern($1, confine_agent_work_t, confine_agent_work_t)
	manage_lnk_files_pattern($1, confine_agent_work_t, confine_agent_work_t)
')
"""


def parts(policy: Policy, workdir: str | None = None, command: str = "confine export selinux") -> dict[str, str]:
    """File name -> text, for -o DIR."""
    return {
        f"{MODULE}.te": te(policy, command),
        f"{MODULE}.fc": fc(policy, workdir, command),
        f"{MODULE}.if": interface(command),
        f"plain/{MODULE}.te": plain_te(policy, command),
        f"plain/{MODULE}.fc": plain_fc(policy, workdir, command),
    }

"""The outer supervisor's side of confine inside confine (see delegate.py).

The outer run's supervisor binds the endpoint, a unix socket in the run's private
TMPDIR, before its child, and forks a delegation server beside the child's first
steps, which forks one handler per request (bounded). A handler never runs agent
code: it validates the request, parses the inner profile itself and plans the
nested run for a host without namespaces of its own (the nested run lives in the
outer agent's), then forks the nested child:

  handler (outside, unconfined: the nested run's mediator)
   `- relay: setns() into the outer agent's namespaces (user, mount, net, ipc,
      uts, pid: those that differ), forks, passes signals and the exit status on
       `- init: outer's Landlock domain, then the inner's (the kernel intersects
          them), broker forked, the seccomp filters of both, a notify filter
          whose listener (this chain has none yet) goes back to the handler
           `- the command

Every mediated call of the nested run is performed by its own broker, inside
BOTH Landlock domains, and judged by both policies: pathname unix sockets only
where both allow them, metadata calls only where both grant writes, new names
by one guard holding the protected patterns of both.

Who may ask: a process of the outer run (its uid; the connect is performed by
the outer's broker, whose seccomp filters the server counts). A process of a
nested run has more filters than any process of the outer run and is refused:
it could otherwise ask for a run wider than its own. Anything else the request
asks can only narrow the outer's policy.

Where a step cannot be done here (setns refused, say) the nested run is refused
with the reason: never run with less.
"""
from __future__ import annotations

import ctypes
import dataclasses
import errno
import functools
import json
import os
import resource
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfineError
from ..kernel import caps, keyring, landlock, seccomp
from ..kernel.libc import libc
from ..mediation import broker_main
from ..paths import is_under
from ..plan import HostFacts, Plan, Protected, compile
from ..record import dataclass, field
from . import child, status
from . import delegate as proto
from .channels import MediationChannel
from .supervise import FORWARD, kill_leftovers, own_children, wait_for

MAX_NESTED = 8          # nested runs of one outer run at a time
MAX_ARGV = 4096
REQUEST_SECONDS = 10    # a connection that sends no request in time is dropped
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_NS = (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS), ("net", CLONE_NEWNET),
       ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS), ("pid", CLONE_NEWPID))


class Refused(Exception):
    """The nested run is refused: the reason goes to the inner confine (125)."""


@dataclass
class Outer:
    """What the server knows of the outer run (a copy, made at the fork)."""
    plan: Plan
    filters: int              # seccomp filters of the outer's broker beyond the server's own
    supervisor: int           # the outer's supervisor: every process of the run descends from it


@dataclass
class Endpoint:
    """The endpoint bound and listening, its server not yet forked (fork_server)."""
    lsock: socket.socket
    outer: Outer
    inherit: dict[int, tuple[int, int]]   # open at the bind (fd: its file): all it may keep


def bind(plan: Plan, path: str) -> Endpoint:
    """Bind the endpoint, so that it is there before the agent runs; the server is
    forked later, beside the child's first steps (fork_server)."""
    from .launch import _filter_count
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        lsock.bind(path)
        if os.geteuid() == 0:
            os.chown(path, plan.identity.uid, plan.identity.gid)
        os.chmod(path, 0o600)
        lsock.listen(16)
        inherit = _open_files()
    except OSError as e:
        lsock.close()
        raise ConfineError(f"cannot offer the nested-run endpoint {path}: "
                           f"{e.strerror or e}") from None
    return Endpoint(lsock=lsock, outer=Outer(plan=plan, filters=_filter_count(plan),
                                             supervisor=os.getpid()), inherit=inherit)


def fork_server(ep: Endpoint) -> int:
    """Fork the server (its pid; it dies with the supervisor). Done after the outer's
    child is forked, so the server must not keep what was opened since the bind:
    the child's pipes and sockets (their ends must close when the supervisor
    closes them) and the run's own; it closes every descriptor but those open at
    the bind, which is what it would have held forked then. The endpoint's socket
    is closed here either way: without a server, a connect is refused."""
    parent = ep.outer.supervisor
    try:
        pid = os.fork()
    except OSError as e:
        ep.lsock.close()
        raise ConfineError(f"cannot start the nested-run endpoint's server: "
                           f"{e.strerror or e}") from None
    if pid == 0:
        try:
            caps.set_pdeathsig(signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(0)
            for fd, ident in _open_files().items():
                if fd > 2 and ep.inherit.get(fd) != ident:
                    os.close(fd)
            _serve(ep.lsock, ep.outer)
        finally:
            os._exit(0)
    ep.lsock.close()
    return pid


def _open_files() -> dict[int, tuple[int, int]]:
    """This process's descriptors and what each is (device, inode): a number the
    supervisor closed and opened again for a pipe or socket of the child (each has
    an inode of its own) is not the same one."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.fstat(int(name))
        except OSError:
            continue            # the listing's own descriptor, closed already
        out[int(name)] = (st.st_dev, st.st_ino)
    return out


def _serve(lsock: socket.socket, outer: Outer) -> None:
    for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTOU, signal.SIGTTIN):
        signal.signal(s, signal.SIG_IGN)     # the terminal's: the inner confine relays them
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    live: set[int] = set()
    while True:
        try:
            conn, _ = lsock.accept()
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)
        for p in list(live):
            try:
                if os.waitpid(p, os.WNOHANG)[0] == p:
                    live.discard(p)
            except ChildProcessError:
                live.discard(p)
        if len(live) >= MAX_NESTED:
            _drain(conn)
            _reply(conn, {"refused": f"too many nested runs at once (at most {MAX_NESTED})"})
            conn.close()
            continue
        try:
            pid = os.fork()
        except OSError:
            conn.close()
            continue
        if pid == 0:
            code = 0
            try:
                lsock.close()
                caps.set_pdeathsig(signal.SIGKILL)
                _handle(conn, outer)
            except BaseException:  # noqa: BLE001 - the handler's end: never the server's
                code = 1
            finally:
                os._exit(code)
        live.add(pid)
        conn.close()


def _drain(conn: socket.socket) -> None:
    """Read (and drop) a request before refusing it: closing a connection with
    its request unread would reset it, losing the reply that says why."""
    conn.settimeout(1.0)
    try:
        _, fds, _, _ = socket.recv_fds(conn, proto.MAX_REQUEST + 1, 4)
        for f in fds:
            os.close(f)
    except OSError:
        pass


def _reply(conn: socket.socket, msg: dict[str, Any]) -> None:
    try:
        conn.send(json.dumps(msg).encode())
    except OSError:
        pass


# -- one request ------------------------------------------------------------------------

_NESTED_PEER = ("the delegation endpoint serves only the outer run's own processes (this "
                "one is inside a nested run: only one level of nesting is supported)")


def _peer_ok(conn: socket.socket, outer: Outer) -> None:
    """The connecting process is of the outer run itself, not of a nested one."""
    import struct
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", raw)
    if uid != outer.plan.identity.uid or pid <= 0:
        raise Refused("the delegation endpoint serves only the outer run's processes")
    mine, theirs = _filter_count(os.getpid()), _filter_count(pid)
    # the outer's broker performs the connect (outer filters); a direct connect
    # (no mediation of it) would come from an agent process (one notify filter more)
    if mine is None or theirs is None or theirs - mine not in (outer.filters,
                                                                outer.filters + 1):
        raise Refused(_NESTED_PEER)


def _asker(pidfd: int, outer: Outer) -> int:
    """The pid of the process the inner's pidfd names, if it is an agent process of
    the outer run (a descendant of its supervisor, its uid, exactly the filters of
    the outer's agent: a nested run's processes have more)."""
    pid = None
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
    except (OSError, ValueError):
        pid = None
    if pid is None or pid <= 0:
        raise Refused("malformed nested-run request: the last descriptor must be a pidfd of "
                      "the asking process")
    sup = outer.supervisor
    p, steps = pid, 0
    while p not in (sup, 0, 1) and steps < 4096:
        p, steps = _ppid(p), steps + 1
    if p != sup:
        raise Refused("the delegation endpoint serves only the outer run's processes")
    try:
        with open(f"/proc/{pid}/status") as f:
            uids = next(ln for ln in f if ln.startswith("Uid:")).split()[1:]
    except (OSError, StopIteration):
        raise Refused("nested run: the process that asked is gone") from None
    if any(int(u) != outer.plan.identity.uid for u in uids):
        raise Refused("the delegation endpoint serves only the outer run's processes")
    mine, theirs = _filter_count(os.getpid()), _filter_count(pid)
    if mine is None or theirs is None or theirs - mine != outer.filters + 1:
        raise Refused(_NESTED_PEER)
    return pid


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _filter_count(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Seccomp_filters:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    msg, fds, flags, _ = socket.recv_fds(conn, proto.MAX_REQUEST + 1, 4, socket.MSG_CMSG_CLOEXEC)
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(msg) > proto.MAX_REQUEST:
        for f in fds:
            os.close(f)
        raise Refused(f"nested-run request too large (at most {proto.MAX_REQUEST} bytes)")
    try:
        req = json.loads(msg)
    except ValueError:
        for f in fds:
            os.close(f)
        raise Refused("malformed nested-run request (not JSON)") from None
    return req, fds


def _str(v: Any, what: str, *, absolute: bool = False, limit: int = 65536) -> str:
    if not isinstance(v, str) or "\0" in v or len(v) > limit:
        raise Refused(f"malformed nested-run request: {what} must be a string without NUL")
    if absolute and not os.path.isabs(v):
        raise Refused(f"malformed nested-run request: {what} must be an absolute path")
    return v


def _strs(v: Any, what: str, limit: int = 1024) -> list[str]:
    if not isinstance(v, list) or len(v) > limit:
        raise Refused(f"malformed nested-run request: {what} must be a list of strings")
    return [_str(x, what) for x in v]


@dataclass
class NestedRequest:
    argv: list[str]
    cwd: str
    env: dict[str, str]
    layers: list[dict[str, Any]]
    ref: str
    workdir: str | None
    read: list[str]
    write: list[str]
    cli_env: list[str]
    force_workdir: bool
    allow_degraded: bool | list[str]
    agent_status: bool
    dry_run: bool


def validate(req: Any) -> NestedRequest:
    """Every field checked for type and bounds; anything else is refused."""
    if not isinstance(req, dict) or req.get("v") != 1:
        raise Refused("malformed nested-run request (not a version 1 object)")
    argv = _strs(req.get("argv"), "argv", MAX_ARGV)
    if not argv or not argv[0]:
        raise Refused("malformed nested-run request: no command")
    env = req.get("env")
    if not isinstance(env, dict) or len(env) > 4096:
        raise Refused("malformed nested-run request: env must be an object of strings")
    for k, v in env.items():
        if not isinstance(k, str) or "=" in k or "\0" in k or not k:
            raise Refused("malformed nested-run request: env must be an object of strings")
        _str(v, f"env {k}")
    prof = req.get("profile")
    if not isinstance(prof, dict):
        raise Refused("malformed nested-run request: profile must be an object")
    layers = prof.get("layers")
    if not isinstance(layers, list) or not 1 <= len(layers) <= proto.MAX_LAYERS:
        raise Refused("malformed nested-run request: profile layers")
    for lay in layers:
        if not isinstance(lay, dict) or not isinstance(lay.get("builtin"), bool):
            raise Refused("malformed nested-run request: profile layers")
        _str(lay.get("text"), "profile text", limit=proto.MAX_REQUEST)
        _str(lay.get("path"), "profile path")
        name = _str(lay.get("name"), "profile name", limit=200)
        if not name or "/" in name or name.startswith("."):
            raise Refused(f"malformed nested-run request: profile name {name!r}")
    wd = req.get("workdir")
    ad = req.get("allow_degraded")
    if not isinstance(ad, bool):
        ad = _strs(ad, "allow_degraded", 64)
    for k in ("force_workdir", "agent_status", "dry_run"):
        if not isinstance(req.get(k), bool):
            raise Refused(f"malformed nested-run request: {k} must be true or false")
    return NestedRequest(
        argv=argv, cwd=_str(req.get("cwd"), "cwd", absolute=True), env=dict(env),
        layers=layers, ref=_str(prof.get("ref"), "profile ref", limit=4096),
        workdir=None if wd is None else _str(wd, "workdir", absolute=True),
        read=_strs(req.get("read"), "read"), write=_strs(req.get("write"), "write"),
        cli_env=_strs(req.get("cli_env"), "cli_env"), force_workdir=req["force_workdir"],
        allow_degraded=ad, agent_status=req["agent_status"], dry_run=req["dry_run"])


def _handle(conn: socket.socket, outer: Outer) -> None:
    fds: list[int] = []
    tmp: str | None = None
    try:
        try:
            conn.settimeout(REQUEST_SECONDS)
            raw, fds = _receive(conn)       # read first: the asker's send then completes
            conn.settimeout(None)
            _peer_ok(conn, outer)
            req = validate(raw)
            if not req.dry_run and len(fds) != 4:
                raise Refused("malformed nested-run request: the standard descriptors and "
                              "a pidfd (4) must come with it")
            peer = 0 if req.dry_run else _asker(fds[3], outer)
            nested, tmp = plan_nested(outer, req)
            if req.dry_run:
                d = nested.plan.to_dict()
                d["delegation"] = describe(outer, nested)
                _reply(conn, {"plan": d})
                return
            for m in nested.degraded:
                os.write(fds[2], f"confine: degraded: NOT enforced: {m}\n".encode())
            code = run_nested(conn, outer, nested, peer, fds)
        except (Refused, ConfineError) as e:
            _reply(conn, {"refused": str(e)})
            return
        except TimeoutError:
            _reply(conn, {"refused": "no nested-run request within "
                                     f"{REQUEST_SECONDS} seconds"})
            return
        except Exception as e:  # noqa: BLE001 - the inner learns it, the server goes on
            _reply(conn, {"refused": f"nested run: internal error: {type(e).__name__}: {e}"})
            return
        _reply(conn, {"exit": code})
    finally:
        for f in fds:
            os.close(f)
        if tmp is not None:
            from .workdir import remove_tree
            remove_tree(tmp)


# -- the nested plan ----------------------------------------------------------------------

@dataclass
class Nested:
    plan: Plan
    guard: Any
    unix_roots: list[str]
    meta: tuple[list[str], list[str]]
    degraded: list[str] = field(default_factory=list)   # accepted, said at start


def intersect(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """Paths inside one of `a` AND one of `b` (each a directory tree or a file)."""
    out: list[str] = []
    for x in a:
        for y in b:
            p = x if is_under(x, y) else y if is_under(y, x) else None
            if p is not None and p not in out:
                out.append(p)
    return out


def _load_policy(outer: Outer, req: NestedRequest, wd: str, home: str, tmp: str) -> Any:
    """The inner profile from the texts the inner read in its own view, parsed
    here: written to a private directory, each `extends` resolved to the next
    text sent (a built-in name only to confine's own built-in profile)."""
    import tempfile
    priv = tempfile.mkdtemp(prefix="confine-nested-profile-")
    try:
        return _parse_layers(req, wd, home, tmp, priv)
    except ConfineError as e:       # said with the inner's own file names
        msg = str(e)
        for i, lay in enumerate(req.layers):
            msg = msg.replace(os.path.join(priv, str(i), f"{lay['name']}.yaml"), lay["path"])
        raise Refused(msg) from None
    finally:
        import shutil
        shutil.rmtree(priv, ignore_errors=True)


def _parse_layers(req: NestedRequest, wd: str, home: str, tmp: str, priv: str) -> Any:
    from ..policy import load as _load
    chain: list[Path] = []
    parsed = []
    for i, lay in enumerate(req.layers):
        if lay["builtin"]:
            p = _load.builtin_dir() / f"{lay['name']}.yaml"
            if not p.is_file():
                raise Refused(f"profile {req.ref}: no built-in profile {lay['name']!r} here")
        else:
            d = os.path.join(priv, str(i))
            os.mkdir(d, 0o700)
            p = Path(d) / f"{lay['name']}.yaml"
            p.write_text(lay["text"])
        data = _load._Parser(p).parse()
        parent = data.get("extends")
        if (parent is None) != (i == len(req.layers) - 1):
            raise Refused(f"profile {req.ref}: its extends chain does not match the "
                          "files sent")
        chain.append(p)
        parsed.append(data)
    raw: dict[str, Any] = {}
    for data in reversed(parsed):
        raw = _load._merge(raw, data)
    pol = _load.load(req.ref, workdir=wd, home=home, tmp=tmp, extra_read=req.read,
                     extra_write=req.write, layers=(raw, chain))
    shown = [lay["path"] for lay in req.layers]
    # the outermost run gets values (it would run the inner profile's commands outside)
    needed = [c.name for c in pol.credentials if not c.optional]
    if needed:
        raise Refused(f"nested run: credentials ({', '.join(needed)}) are given by the "
                      "outermost confine run only: bind them there")
    return dataclasses.replace(pol, sources=tuple(shown), credentials=())


def _as_agent(outer: Outer, fn: Callable[[], Any]) -> Any:
    """fn() judged with the agent's own file-system identity: the handler runs
    outside the sandbox (as root, when the outer was started as root), and what it
    looks at for a request must be only what the agent could look at itself, or a
    request would read the host for it (an oracle: issue 21 item 5)."""
    ident = outer.plan.identity
    if os.geteuid() != 0 or ident.uid == 0:
        return fn()
    if not caps.fs_identity_supported():
        raise Refused("nested run: cannot judge the request with the agent's identity on "
                      "this architecture")
    return caps.in_fs_identity(ident.uid, ident.gid, fn)


def _inner_workdir(outer: Outer, req: NestedRequest) -> str:
    """The nested workdir's real path, if it is a directory the agent can open
    itself, inside the outer run's writable paths. Every other request gets the
    same refusal, naming only the rule and the path it asked for, whether the path
    exists or not: the handler's answer tells the agent nothing it could not learn
    itself."""
    if req.force_workdir:
        raise Refused("nested run: --force-workdir is not accepted from inside a run (an "
                      "inner workdir must lie inside the outer run's writable paths)")
    asked = os.path.normpath(req.workdir or req.cwd)
    writable = outer.plan.writable_paths()
    refused = Refused(f"nested run: refusing workdir {asked}: an inner workdir must be a "
                      "directory the agent can open, inside the outer run's writable paths ("
                      + ", ".join(writable) + ")")
    if not any(is_under(asked, w) for w in writable):
        raise refused       # before any look at the path
    def opened() -> int:
        return os.open(asked, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd: int = _as_agent(outer, opened)
    except OSError:
        raise refused from None
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        raise refused from None
    finally:
        os.close(fd)
    if not any(is_under(real, w) for w in writable):
        raise refused       # a symlink inside the writable paths that leads out of them
    return real


def plan_nested(outer: Outer, req: NestedRequest) -> tuple[Nested, str]:
    from .workdir import check_workdir
    op = outer.plan
    ident = op.identity
    home = op.agent_home or ident.home
    wd = check_workdir(_inner_workdir(outer, req), sorted({ident.home, home}), False)
    for p in req.read + req.write:
        # as the agent: "does not exist" for what it cannot reach either
        if not os.path.isabs(p) or not _as_agent(outer, functools.partial(os.path.exists, p)):
            raise Refused(f"{p} does not exist (from --read/--write)")
    ident = dataclasses.replace(ident, home=home, notes=())
    tmp = _make_tmp(op, ident.uid, ident.gid)
    try:
        pol = _load_policy(outer, req, wd, home, tmp)
        for d in pol.deny:
            if is_under(wd, d.path):
                raise Refused(f"refusing workdir {wd}: it lies inside the protected secret {d.path}")
        facts = HostFacts(landlock_abi=op.abi, seccomp_filter=True, seccomp_user_notif=True,
                          namespaces=False, net_namespace=False, cgroup=None,
                          seccomp_listener_busy=False, root_mounts=False,
                          pidfd_getfd=op.pidfd_getfd, ptrace_others=op.mediate_as is None)
        if pol.network.connect_tcp or pol.network.bind_tcp or pol.network.egress:
            raise Refused(f"nested run: profile {pol.name} asks for network access (TCP ports "
                          "or the egress gateway), which nested runs do not have yet: use a "
                          "profile without network keys (e.g. strict)")
        guard, snap, root = _guard(outer, pol, wd)
        prot = Protected(mount_plan=snap.mount_plan, description=snap.describe(),
                         guard=guard is not None)
        env = {k: v for k, v in req.env.items() if k != proto.ENV}
        for item in req.cli_env:
            name = item.split("=", 1)[0]
            if "=" not in item and name not in env:
                raise Refused(f"--env {name}: not set in this environment, so there is "
                              f"nothing to pass (set it with --env {name}=VALUE)")
        plan = compile(pol, req.argv, ident, facts, parent_env=env, cli_env=req.cli_env,
                       protected=prot, agent_home=None)
        if plan.signal_mediation or plan.refuse_abstract:
            # the seccomp replacements judge pids and abstract names in the supervisor's
            # view; a nested run lives in the outer agent's pid and network namespaces
            which = "landlock.scope_signal" if plan.signal_mediation else \
                "landlock.scope_abstract_unix"
            raise Refused(f"nested run: cannot enforce {which}: Landlock scoping needs ABI 6 "
                          f"(this kernel has ABI {plan.abi}), and a nested run shares the "
                          "outer agent's pid and network namespaces, where confine's "
                          "seccomp replacements cannot judge")
        notes = (f"nested run: delegated to the outer supervisor (outer profile "
                 f"{op.policy.name}); confined by both policies",
                 f"nested run: HOME is the outer run's ({home}); protected names judged for "
                 f"{root} by the patterns of both profiles",)
        # the nested run lives in the outer agent's namespaces: what they hide stays hidden
        kept = tuple(n for n in plan.notes
                     if not (op.pid_ns and n.startswith("processes: no pid namespace"))
                     and not (op.net_ns and n.startswith("network tables:")))
        plan = dataclasses.replace(plan, env={**plan.env, proto.ENV: proto.NESTED},
                                   notes=kept + notes)
        if not req.dry_run:
            _refuse_missing(plan, req.allow_degraded)
        pr, po = plan.meta_roots(), op.meta_roots()
        holes = sorted(set(pr[1]) | set(po[1]))
        roots = intersect(pr[0], op.writable_paths())
        meta = (roots, [h for h in holes if any(is_under(h, r) for r in roots)])
        nested = Nested(plan=plan, guard=guard,
                        unix_roots=intersect(plan.unix_roots(), op.unix_roots()), meta=meta,
                        degraded=[f"{m.feature}: {m.detail}" for m in plan.missing])
        return nested, tmp
    except BaseException:
        from .workdir import remove_tree
        remove_tree(tmp)
        raise


def _refuse_missing(plan: Plan, allow: bool | list[str]) -> None:
    """As session.refuse_missing (its --degrade names), for the nested plan."""
    def accepted(f: str) -> bool:
        return allow is True or (isinstance(allow, list) and (
            f in allow or (f.startswith("mount_namespace.") and "mount_namespace" in allow)))
    refused = [m for m in plan.missing if not accepted(m.feature)]
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise Refused(f"nested run: cannot enforce {first.feature}: {first.detail}{more}; "
                      f"refusing to run (--degrade {first.feature} or --allow-degraded runs "
                      "without it)")


def _make_tmp(op: Plan, uid: int, gid: int) -> str:
    """The nested run's TMPDIR, inside the outer's (the agent's own directory: what
    it could swap there is still inside the outer's grants)."""
    import tempfile
    try:
        tmp = tempfile.mkdtemp(prefix="confine-", dir=op.policy.tmp)
        os.chmod(tmp, 0o700)
        if os.geteuid() == 0:
            os.chown(tmp, uid, gid)
    except OSError as e:
        raise Refused(f"cannot make the nested run's TMPDIR in {op.policy.tmp}: "
                      f"{e.strerror or e}") from None
    return tmp


def _guard(outer: Outer, pol: Any, wd: str) -> tuple[Any, Any, str]:
    """One name guard for the patterns of both profiles, over the outer's workdir
    when the nested one lies inside it (the outer's names stay judged), else over
    the nested workdir when the nested run cannot write into the outer's."""
    from .. import protect
    op = outer.plan.policy
    inner_pats = protect.effective(pol)
    outer_pats = protect.effective(op)
    pats = list(dict.fromkeys(list(outer_pats) + list(inner_pats)))
    if is_under(wd, op.workdir):
        root = op.workdir
        if wd != op.workdir and any(p.startswith("/") for p in inner_pats
                                    if p not in outer_pats):
            raise Refused("nested run: the inner profile protects names at the top of its "
                          "workdir (/PATTERN), which is not the outer's: unsupported")
    else:
        mine = [pol.workdir, pol.tmp] + [g.path for g in pol.write]
        if intersect(mine, [op.workdir]):
            raise Refused(f"nested run: its workdir {wd} lies outside the outer's "
                          f"({op.workdir}) but it may write inside the outer's: one name "
                          "guard cannot judge both; use a workdir inside the outer's")
        root = wd
    # the outer's other protected roots (its write grants: protect/roots.py) are judged
    # by the outer's guard only, which the nested run's calls never reach
    from ..protect.roots import roots_of
    mine = [pol.workdir] + [g.path for g in pol.write if g.source not in ("workdir", "tmp")]
    others = [r.path for r in roots_of(op) if not is_under(root, r.path)]
    if intersect(mine, others):
        raise Refused(f"nested run: it may write in {', '.join(intersect(mine, others))}, a "
                      "protected root of the outer run that its name guard cannot judge; "
                      "drop that grant from the nested run")
    try:
        snap = protect.snapshot(root, pats, home=outer.plan.identity.home, guarded=True)
    except (OSError, ValueError) as e:
        raise Refused(f"cannot snapshot the protected paths of {root}: {e}") from None
    guard = protect.Guard.from_snapshot(snap) if snap.patterns else None
    return guard, snap, root


def describe(outer: Outer, nested: Nested) -> dict[str, Any]:
    op, ip = outer.plan, nested.plan
    writable = intersect(ip.writable_paths(), op.writable_paths())
    lines = [
        f"to the outer supervisor (outer profile {op.policy.name}, workdir "
        f"{op.policy.workdir}): the nested run is made by it, in the outer agent's namespaces",
        "Landlock: the outer's domain, then this profile's (the kernel allows what both allow)",
        "seccomp: the outer's filters and this profile's; mediated calls performed by the "
        "nested run's own broker inside both Landlock domains",
        "writable (both grant it): " + (", ".join(writable) or "nothing"),
        "unix sockets (both allow them): " + (", ".join(nested.unix_roots) or "none"),
        "namespaces: the outer agent's (" + (", ".join(
            n for n, on in (("mount", op.mount_ns), ("pid", op.pid_ns), ("network", op.net_ns))
            if on) or "none: the outer has none") + "); none of its own",
        "exit check: the outer's, when the outer run ends",
    ]
    return {"mechanism": "delegated to the outer supervisor", "outer_profile": op.policy.name,
            "writable": writable, "unix_sockets": nested.unix_roots, "lines": lines}


# -- the nested run -----------------------------------------------------------------------

def _ns_flags(pid: int) -> int:
    flags = 0
    for name, flag in _NS:
        try:
            theirs = os.stat(f"/proc/{pid}/ns/{name}")
            mine = os.stat(f"/proc/self/ns/{name}")
        except OSError as e:
            raise Refused(f"nested run: cannot read the outer agent's {name} namespace "
                          f"({e.strerror or e}): setns is not possible here; refusing") from None
        if (theirs.st_dev, theirs.st_ino) != (mine.st_dev, mine.st_ino):
            flags |= flag
    return flags


def _setns(pidfd: int, flags: int) -> None:
    if libc.setns(ctypes.c_int(pidfd), ctypes.c_int(flags)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns into the outer agent's namespaces refused: {os.strerror(e)}")


def _marker_filter() -> None:
    """An allow-all filter: a nested run's processes always have more filters than
    any of the outer run's, which is how the endpoint tells them apart."""
    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]
    prog = (SockFilter * 1)(SockFilter(0x06, 0, 0, 0x7FFF0000))    # RET ALLOW
    fp = SockFprog(1, prog)
    if libc.prctl(22, 2, ctypes.byref(fp), 0, 0) != 0:             # PR_SET_SECCOMP, FILTER
        e = ctypes.get_errno()
        raise OSError(e, f"marker seccomp filter: {os.strerror(e)}")


def run_nested(conn: socket.socket, outer: Outer, nested: Nested, peer: int,
               fds: list[int]) -> int:
    """Fork the relay (which joins the outer agent's namespaces) and mediate the
    nested run until it ends; its status."""
    from ..mediation import Mediator
    from .launch import _filters, _ruleset
    op, ip = outer.plan, nested.plan
    pidfd = os.dup(fds[3])
    flags = _ns_flags(peer)
    if _filter_count(peer) is None:
        raise Refused("nested run: the outer process that asked is gone")
    outer_rules, inner_rules = _ruleset(op), _ruleset(ip)
    if outer_rules is None or inner_rules is None:
        raise Refused("nested run: no Landlock here (both domains are required)")
    filters = _filters(op) + _filters(ip)
    if not _filters(ip):
        raise Refused("nested run: no seccomp filter for the inner profile")
    med = MediationChannel.open(nested.guard, files=True, meta=True, bind=True)
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    say_fd = fds[2]
    init: list[int] = []

    def say(msg: str) -> None:
        if msg.startswith("the broker is gone") and init and not _running(init[0]):
            return      # the nested run's end: its init died, the broker with it
        try:
            os.write(say_fd, f"confine: {msg}\n".encode(errors="replace"))
        except OSError:
            pass
    sigset = set(FORWARD) | {signal.SIGCHLD}
    signal.signal(signal.SIGCHLD, lambda *_: None)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, sigset)
    handler = os.getpid()
    relay = os.fork()
    if relay == 0:
        try:
            os.close(status_r)
            med.close_supervisor_ends_in_child()
            for target, fd in enumerate(fds[:3]):
                os.dup2(fd, target)
            _relay(op, ip, pidfd, flags, outer_rules, inner_rules, filters, med, status_w,
                   handler, old_mask)
        except BaseException as e:  # noqa: BLE001 - said, then 125: never run half-confined
            try:
                status.send(status_w, status.SetupFailed("nested", f"{e.strerror or e}"
                                                         if isinstance(e, OSError) else
                                                         f"{type(e).__name__}: {e}"))
            finally:
                os._exit(125)
        finally:
            os._exit(125)
    os.close(status_w)
    os.close(pidfd)
    outer_rules.close()
    inner_rules.close()
    med.close_child_ends()
    failure = _watch_status(status_r, med, nested, ip, say, Mediator, init)
    os.close(status_r)
    os.close(med.sync_w)
    med.hand_sup.close()      # all the child passes has arrived
    stop = threading.Event()
    threading.Thread(target=_relay_signals, args=(conn, relay, stop), daemon=True).start()
    code = wait_for(relay)
    stop.set()
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    if isinstance(failure, status.ExecFailed):
        cmd = ip.argv[0]
        say(f"{cmd}: command not found (searched PATH inside the sandbox)"
            if failure.errno == errno.ENOENT else f"{cmd}: cannot execute: {failure.message}")
    elif failure is not None:
        raise Refused(f"nested run: setup {getattr(failure, 'step', '?')}: "
                      f"{getattr(failure, 'message', failure)}")
    return code


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _watch_status(status_r: int, med: MediationChannel, nested: Nested, ip: Plan,
                  say: Callable[[str], None], mediator: Any,
                  init: list[int]) -> status.Message | None:
    failure: status.Message | None = None
    for msg in status.receive(status_r):
        if isinstance(msg, status.Begin):
            continue
        if isinstance(msg, status.InitPid):
            init.append(msg.pid)
            continue
        if isinstance(msg, status.Listener):
            try:
                nfd = med.take_listener()
                mediator(nfd, med.broker_sup, nested.unix_roots, ip.identity.uid, warn=say,
                         files=True, inet_routes=None, events=None,
                         meta=nested.meta, real_ids=ip.mediate_as).start()
            except OSError as e:
                failure = status.SetupFailed("seccomp_notify", f"cannot take over the "
                                             f"seccomp listener: {e}")
                continue
            os.write(med.sync_w, b"g")
        elif failure is None:
            failure = msg
    return failure


def _relay_signals(conn: socket.socket, relay: int, stop: threading.Event) -> None:
    """INT/TERM/HUP the inner confine received, passed to the relay (which passes
    them on); the inner gone (its end closed) ends the nested run."""
    while not stop.is_set():
        try:
            data = conn.recv(4096)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            if not stop.is_set():
                try:
                    os.kill(relay, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        try:
            sig = json.loads(data).get("signal")
        except (ValueError, AttributeError):
            continue
        if sig in proto.RELAYED:
            try:
                os.kill(relay, int(sig))
            except ProcessLookupError:
                return


def _relay(op: Plan, ip: Plan, pidfd: int, flags: int, outer_rules: Any, inner_rules: Any,
           filters: list[Any], med: MediationChannel, status_w: int, handler: int,
           old_mask: Any) -> None:
    """The relay: joins the outer agent's namespaces (a new pid namespace applies
    to its children), forks the nested init, forwards signals, exits with its status."""
    caps.set_pdeathsig(signal.SIGKILL)
    if os.getppid() != handler:
        os._exit(125)
    keep = {status_w, outer_rules.fileno(), inner_rules.fileno(), pidfd} | set(med.child_fds())
    lo = 3
    for fd in sorted(keep):
        os.closerange(lo, fd)
        lo = fd + 1
    os.closerange(lo, 65536)
    status.send(status_w, status.Begin("setns"))
    if flags:              # the outer agent may have no namespace of its own
        _setns(pidfd, flags)
    os.close(pidfd)
    me = os.getpid()
    init = os.fork()
    if init != 0:
        status.send(status_w, status.InitPid(init))
        os.close(status_w)
        outer_rules.close()
        inner_rules.close()
        med.close_child_ends()
        caps.set_dumpable(False)
        os._exit(wait_for(init))
    _init(op, ip, flags, outer_rules, inner_rules, filters, med, status_w, me, old_mask)


def _init(op: Plan, ip: Plan, flags: int, outer_rules: Any, inner_rules: Any,
          filters: list[Any], med: MediationChannel, status_w: int, relay: int,
          old_mask: Any) -> None:
    def step(name: str) -> None:
        status.send(status_w, status.Begin(name))
    caps.set_pdeathsig(signal.SIGKILL)
    # orphans of the nested run come back here, to be killed when its command ends
    caps.set_child_subreaper()
    if flags & CLONE_NEWPID:
        if os.getppid() != 0:         # the relay lives outside the pid namespace
            os._exit(125)
    elif os.getppid() != relay:
        os._exit(125)
    # the server ignored the terminal's signals; the command gets every default back
    for s in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTSTP, signal.SIGTTOU,
              signal.SIGTTIN) + FORWARD + (signal.SIGCHLD,):
        signal.signal(s, signal.SIG_DFL)
    step("landlock_new_mounts")
    for path, access in op.child_rules:
        if os.path.exists(path):
            landlock.add(outer_rules, path, access)
    for path, access in ip.child_rules:
        if os.path.exists(path):
            landlock.add(inner_rules, path, access)
    step("chdir")
    os.chdir(ip.policy.workdir)
    ident = op.identity
    if ident.switch:
        step("identity")
        caps.switch_user(ident.uid, ident.gid)
    step("capabilities")
    caps.drop_all(privileged=ident.started_as_root or bool(flags & CLONE_NEWUSER) or op.mount_ns)
    caps.set_pdeathsig(signal.SIGKILL)
    step("session_keyring")
    keyring.join_fresh_session()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    caps.set_no_new_privs()
    step("landlock")
    landlock.restrict(outer_rules)
    landlock.restrict(inner_rules)
    outer_rules.close()
    inner_rules.close()
    step("broker")
    me = os.getpid()
    broker = os.fork()
    if broker == 0:
        try:
            os.close(status_w)
            os.close(med.sync_r)
            os.close(med.hand_child)
            caps.set_pdeathsig(signal.SIGKILL)
            if os.getppid() != me:
                os._exit(0)
            caps.set_dumpable(False)
            for f in filters:
                seccomp.load(f)
            _marker_filter()
            broker_main(socket.socket(fileno=med.broker_fd), med.guard)
        finally:
            os._exit(0)
    os.close(med.broker_fd)
    spare = own_children()        # the broker outlives the command's leftovers
    step("seccomp")
    for f in filters:
        seccomp.load(f)
    _marker_filter()
    step("seccomp_notify")
    ctx = child.ChildContext(plan=ip, ruleset=None, filters=filters, status_w=status_w,
                             supervisor=0, old_mask=old_mask, mediation=med)
    child.RUNNERS["seccomp_notify"](ctx)
    caps.set_dumpable(False)
    agent = os.fork()
    if agent != 0:
        os.close(status_w)
        code = wait_for(agent)
        kill_leftovers(spare)
        os._exit(code)
    caps.set_pdeathsig(signal.SIGKILL)
    step("exec")
    child.RUNNERS["exec"](ctx)
    os._exit(125)

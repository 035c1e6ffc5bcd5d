"""confine inside confine: the inner `confine exec` delegates its run to the outer supervisor.

Inside a confined run the inner confine cannot mediate (the outer's filter holds
the one seccomp listener a filter chain may have) and must not let the outer
mediate for it (the outer's broker performs calls in the OUTER Landlock domain:
the inner profile would not hold for them). So the outer offers its agent an
endpoint (a unix socket in the run's private TMPDIR, named by $CONFINE_DELEGATE)
and the inner sends it what it would have run: argv, cwd, environment, its
profile as text read in its own view, the options that shape the policy, and its
standard descriptors (SCM_RIGHTS). The outer supervisor (delegate_server.py)
builds the nested run inside BOTH policies; this side relays INT/TERM/HUP and
exits with the status the outer sends back (125 and one line if it refuses).

Whatever the inner asks can only narrow the outer's policy: the outer's Landlock
domain and seccomp filters are applied first, the inner's on top.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfineError

if TYPE_CHECKING:
    from ..plan import Plan

ENV = "CONFINE_DELEGATE"
# Set in a nested run instead of an endpoint: a third level is refused by name.
NESTED = "-"
SOCKET_NAME = ".confine-delegate"
MAX_REQUEST = 256 * 1024           # one request (argv, env, profile texts), bytes
MAX_REPLY = 4 * 1024 * 1024        # a dry-run's plan
MAX_LAYERS = 8                     # profile files of one `extends` chain
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Options of `confine exec` a nested run does not take (their defaults only).
UNSUPPORTED = ("user", "apparmor", "selinux_context", "log", "allow_host", "approver",
               "approver_socket", "credential",
               "exclusive")     # a nested run has no mount namespace of its own


def endpoint(environ: dict[str, str] | None = None) -> str | None:
    """The outer run's delegation socket when this process runs under confine
    (the seccomp listener is taken and the outer named its endpoint), else None.
    A nested run's own processes get NESTED: refused with a reason."""
    env = os.environ if environ is None else environ
    path = env.get(ENV)
    if not path:
        return None
    from ..kernel import seccomp
    if not seccomp.listener_busy():
        return None          # not under a seccomp listener: a stale variable, run normally
    return path


def offered(plan: Plan, tmp: str | None) -> str | None:
    """The endpoint a run offers its agent, or None: a nested run needs the
    outer's mediated socket calls (the request travels through its broker)."""
    if tmp is None or not plan.unix_mediation or not plan.pidfd_getfd:
        return None
    return os.path.join(tmp, SOCKET_NAME)


def endpoint_of(plan: Plan) -> str | None:
    return plan.env.get(ENV)


def with_endpoint(plan: Plan, path: str) -> Plan:
    import dataclasses

    from ..plan.steps import child_steps
    out = dataclasses.replace(plan, env={**plan.env, ENV: path})
    return dataclasses.replace(out, steps=tuple(child_steps(out)))


def _layers(ref: str) -> list[dict[str, Any]]:
    """The profile's files, child first, read here (in the inner's own view)."""
    from ..policy import load as _load
    _, chain = _load.read_layers(ref)
    if len(chain) > MAX_LAYERS:
        raise ConfineError(f"profile {ref}: more than {MAX_LAYERS} files in its extends chain")
    out = []
    for p in chain:
        builtin = _load.builtin_dir().resolve()
        out.append({"name": p.stem, "path": str(p),
                    "builtin": p.parent.resolve() == builtin, "text": p.read_text()})
    return out


def build_request(argv: Sequence[str], opts: dict[str, Any], *, dry_run: bool,
                  allow_degraded: bool | Sequence[str]) -> dict[str, Any]:
    for k in UNSUPPORTED:
        if opts.get(k):
            flag = "exclusive-workdir" if k == "exclusive" else k.replace("_", "-")
            raise ConfineError(f"--{flag} is not supported in a nested run "
                               "(inside another confine run)")
    if opts.get("agent_home") is False:
        raise ConfineError("--no-agent-home is not supported in a nested run: its HOME is "
                           "always the outer run's")
    profile = opts.get("profile") or "default"
    return {"v": 1, "argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ),
            "profile": {"ref": profile, "layers": _layers(profile)},
            "workdir": os.path.abspath(opts["workdir"]) if opts.get("workdir") else None,
            "read": list(opts.get("read") or ()), "write": list(opts.get("write") or ()),
            "cli_env": list(opts.get("env") or ()),
            "force_workdir": bool(opts.get("force_workdir")),
            "agent_status": bool(opts.get("agent_status")),
            "allow_degraded": (allow_degraded if isinstance(allow_degraded, bool)
                               else list(allow_degraded)),
            "dry_run": dry_run}


def _connect(path: str) -> socket.socket:
    if path == NESTED:
        raise ConfineError("confine cannot run inside a nested confine run (a run that was "
                           "itself delegated to an outer confine): only one level of nesting "
                           "is supported; refusing to run")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        s.connect(path)
    except OSError as e:
        s.close()
        raise ConfineError(f"inside a confine run, cannot reach the outer supervisor's "
                           f"delegation endpoint {path} ({e.strerror or e}): the nested run "
                           "cannot be made; refusing to run") from None
    return s


def _send(s: socket.socket, data: bytes, fds: list[int]) -> None:
    """A send the outer cut short (it refused early and closed) is no error here:
    its reply, still queued, says why."""
    try:
        socket.send_fds(s, [data], fds) if fds else s.send(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def _recv(s: socket.socket) -> dict[str, Any]:
    while True:
        try:
            data = s.recv(MAX_REPLY)
        except InterruptedError:
            continue
        except OSError as e:
            raise ConfineError(f"the outer supervisor closed the delegation ({e.strerror or e})"
                               ) from None
        if not data:
            raise ConfineError("the outer supervisor closed the delegation without a status "
                               "(the outer run ended?)")
        try:
            msg = json.loads(data)
        except ValueError:
            raise ConfineError("the outer supervisor sent a malformed reply") from None
        if not isinstance(msg, dict):
            raise ConfineError("the outer supervisor sent a malformed reply")
        return msg


def dry_run(path: str, request: dict[str, Any]) -> dict[str, Any]:
    """The nested plan as the outer would run it (plan.to_dict() + "delegation")."""
    with _connect(path) as s:
        _send(s, json.dumps(request).encode(), [])
        msg = _recv(s)
    if "refused" in msg:
        raise ConfineError(str(msg["refused"]))
    plan = msg.get("plan")
    if not isinstance(plan, dict):
        raise ConfineError("the outer supervisor sent no plan")
    return plan


def run(path: str, request: dict[str, Any],
        say: Callable[[str], None] | None = None) -> int:
    """Send the request with fds 0, 1, 2 and a pidfd of this process; relay
    signals; the nested run's status."""
    data = json.dumps(request).encode()
    if len(data) > MAX_REQUEST:
        raise ConfineError(f"the nested run's request is {len(data)} bytes (argv, environment "
                           f"and profile), over the {MAX_REQUEST} the outer accepts")
    s = _connect(path)
    got: list[int] = []
    old = {sig: signal.signal(sig, lambda n, _f: got.append(n)) for sig in RELAYED}
    try:
        # this process's own pidfd: the outer joins the namespaces of the asker
        me = os.pidfd_open(os.getpid())
        try:
            _send(s, data, [0, 1, 2, me])
        finally:
            os.close(me)
        while True:
            msg = _recv_relaying(s, got)
            if "refused" in msg:
                raise ConfineError(str(msg["refused"]))
            if "exit" in msg and isinstance(msg["exit"], int):
                return int(msg["exit"])
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        s.close()


def _recv_relaying(s: socket.socket, got: list[int]) -> dict[str, Any]:
    import select
    while True:
        while got:
            sig = got.pop(0)
            try:
                s.send(json.dumps({"signal": int(sig)}).encode())
            except OSError:
                pass
        try:
            r, _, _ = select.select([s], [], [], 0.5)
        except InterruptedError:
            continue
        if r:
            return _recv(s)


def main_exec(argv: Sequence[str], opts: dict[str, Any], *, dry: bool, as_json: bool,
              allow_degraded: bool | Sequence[str], path: str,
              print_plan: Callable[[dict[str, Any]], None]) -> int:
    """`confine exec` inside a confine run (cli/main.py calls this)."""
    req = build_request(argv, opts, dry_run=dry, allow_degraded=allow_degraded)
    if dry:
        plan = dry_run(path, req)
        if as_json:
            print(json.dumps(plan, indent=2))
        else:
            print_plan(plan)
            for line in plan.get("delegation", {}).get("lines", []):
                print(f"delegated: {line}")
        return 0
    sys.stdout.flush()
    return run(path, req)


def check_profiles(path: str, names: Sequence[str]) -> list[dict[str, Any]]:
    """`confine check` inside a run: what the outer supervisor would make of a
    nested run of each profile here (its dry run), by name."""
    out: list[dict[str, Any]] = []
    for name in names:
        ent: dict[str, Any] = {"profile": name, "mechanism": "delegated to the outer supervisor"}
        try:
            plan = dry_run(path, build_request(["true"], {"profile": name}, dry_run=True,
                                               allow_degraded=False))
        except ConfineError as e:
            ent.update(enforceable=False, refused=str(e))
        else:
            ent.update(enforceable=not plan.get("missing"), missing=plan.get("missing", []),
                       writable=plan.get("delegation", {}).get("writable", []))
        out.append(ent)
    return out

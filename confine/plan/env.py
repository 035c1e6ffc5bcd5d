"""The agent's environment: start empty, add an allowlist, never leak secrets.

A name that looks like a credential passes only when named exactly (profile
`env.pass` or --env), never through a glob. Loader and interpreter injection
variables never pass through a glob or the allowlist either.
"""
from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

ALLOWLIST = ("PATH", "LANG", "LC_*", "TERM", "COLORTERM", "TZ", "USER", "LOGNAME",
             "SHELL", "EDITOR")

_SECRETISH = re.compile(
    r"TOKEN|SECRET|KEY|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE"
    r"|^AWS_|^AZURE_|^GCP_|^GOOGLE_|^VAULT_|^SSH_|^GPG_|^DBUS_|^KRB5|^DOCKER_|^KUBECONFIG$"
    r"|^XDG_RUNTIME_DIR$|^WAYLAND_DISPLAY$|^DISPLAY$|^XAUTHORITY$|^PULSE_|^HISTFILE$",
    re.IGNORECASE)

_INJECTION = re.compile(
    r"^(LD_.*|GCONV_PATH|GLIBC_TUNABLES|MALLOC_.*|PYTHONSTARTUP|PYTHONPATH|PYTHONHOME"
    r"|PYTHONUSERBASE|PYTHONINSPECT|PYTHONBREAKPOINT|NODE_OPTIONS|NODE_PATH|NODE_REPL_EXTERNAL_MODULE"
    r"|BASH_ENV|ENV|BASH_FUNC_.*|PROMPT_COMMAND|PS4|SHELLOPTS|BASHOPTS|IFS|CDPATH|ZDOTDIR"
    r"|PERL5LIB|PERL5OPT|PERLLIB|RUBYOPT|RUBYLIB|GEM_.*|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS"
    r"|JDK_JAVA_OPTIONS|CLASSPATH|DOTNET_STARTUP_HOOKS|GOFLAGS|GIT_.*|LESSOPEN|LESSCLOSE"
    r"|PAGER|MANPAGER|GIT_PAGER|EDITOR_.*|VISUAL_.*|TCLLIBPATH|LUA_PATH|LUA_CPATH)$")


# Names `_SECRETISH` catches whose value is a setting or a path, never a credential:
# `confine audit` does not report them as secrets (they still pass only when named).
_NOT_SECRET = re.compile(
    r"^(AWS_(CA_BUNDLE|REGION|DEFAULT_REGION|DEFAULT_OUTPUT|PAGER|PROFILE|DEFAULT_PROFILE"
    r"|CONFIG_FILE|SHARED_CREDENTIALS_FILE|SDK_LOAD_CONFIG|RETRY_MODE|MAX_ATTEMPTS"
    r"|USE_FIPS_ENDPOINT|ENDPOINT_URL)"
    r"|GOOGLE_CLOUD_PROJECT|GOOGLE_CLOUD_REGION|AZURE_CONFIG_DIR|.*_CA_BUNDLE|.*_CA_CERTS?)$")


def looks_secret(name: str) -> bool:
    return bool(_SECRETISH.search(name))


def holds_secret(name: str) -> bool:
    """Does this variable look like it holds a credential (not just a setting or a path)?"""
    return looks_secret(name) and not _NOT_SECRET.match(name)


def is_injection(name: str) -> bool:
    return bool(_INJECTION.match(name))


def build(parent: Mapping[str, str], *, passthrough: Iterable[str] = (),
          profile_set: Iterable[tuple[str, str]] = (), cli: Iterable[str] = (),
          fixed: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Returns (environment, notes). `cli` items are NAME or NAME=VALUE (explicit).
    `fixed` (HOME, TMPDIR, USER, LOGNAME) is set by the plan and wins over the parent."""
    env: dict[str, str] = {}
    notes: list[str] = []

    def take_globs(patterns: Iterable[str], origin: str) -> None:
        for pat in patterns:
            if "*" not in pat:
                continue
            for name, val in parent.items():
                if not fnmatch.fnmatchcase(name, pat):
                    continue
                if looks_secret(name) or is_injection(name):
                    notes.append(f"{name} not passed: matched {pat!r} ({origin}) but looks like "
                                 "a secret or an injection variable; name it exactly to pass it")
                    continue
                env[name] = val

    take_globs(ALLOWLIST, "allowlist")
    for name in ALLOWLIST:
        if "*" not in name and name in parent:
            env[name] = parent[name]
    take_globs(passthrough, "profile env.pass")
    for name in passthrough:
        if "*" not in name and name in parent:
            env[name] = parent[name]  # named exactly: the profile asked for it
    env.update(fixed)
    for k, v in profile_set:
        env[k] = v
    for item in cli:
        if "=" in item:
            k, v = item.split("=", 1)
            env[k] = v
        elif item in parent:
            env[item] = parent[item]
        else:
            notes.append(f"--env {item}: not set in the caller's environment, not passed")
    return env, notes


def with_credentials(env: Mapping[str, str], placeholders: Mapping[str, str],
                     values: Iterable[str] = (), before: Mapping[str, str | None] = {},
                     ) -> tuple[dict[str, str], list[str]]:
    """The environment with each credential's variable holding its placeholder
    (confine/credentials: the real value stays in the supervisor). The credential
    wins over env.pass, env.set and --env, and says so; a variable that would carry
    one of `values` under another name is dropped, and that is said (never the value).
    before: what env.pass and --env gave these names before a first call put stand-ins
    there (None: nothing), so the second call judges the environment as compiled."""
    out = dict(env)
    for name, was in before.items():
        if was is None:
            out.pop(name, None)
        else:
            out[name] = was
    notes = []
    for name, ph in placeholders.items():
        if name in out and out[name] != ph:
            notes.append(f"{name}: the credential's placeholder replaces the value from "
                         "env.pass, env.set or --env (the real value never enters the sandbox)")
        out[name] = ph
    secret = [v for v in values if v]
    if secret:
        for name in list(out):
            if name not in placeholders and any(v in out[name] for v in secret):
                del out[name]
                notes.append(f"{name} not passed: it holds the value of a credential (the "
                             "agent gets that credential's placeholder only)")
    return out, notes


# Set by the run to the egress gateway's proxy (runtime/egress.py), whatever the
# caller's environment or the profile say: a proxy variable naming another
# proxy would only be a way around the gateway (it refuses it anyway).
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
              "all_proxy")
NO_PROXY_VARS = ("NO_PROXY", "no_proxy")
NO_PROXY = "localhost,127.0.0.1,::1"     # the agent's own loopback only


def proxy_env(host: str, port: int) -> dict[str, str]:
    url = f"http://{host}:{port}"
    return {**{k: url for k in PROXY_VARS}, **{k: NO_PROXY for k in NO_PROXY_VARS}}


# Per-user servers the agent must not reach through the user's own session: their
# variables name the user's server (tmux, screen), never the agent's.
USER_SERVERS = {"TMUX": "tmux", "TMUX_PANE": "tmux", "STY": "screen"}


def home_vars(home: str) -> dict[str, str]:
    """HOME and what tools derive their state from, all in the agent's own home
    (runtime/home.py): pip and pnpm (XDG_CACHE_HOME), npm (~/.npm), cargo (~/.cargo),
    go (~/go, XDG_CACHE_HOME/go-build), yarn, shell history."""
    return {"HOME": home,
            "XDG_CONFIG_HOME": f"{home}/.config", "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_DATA_HOME": f"{home}/.local/share", "XDG_STATE_HOME": f"{home}/.local/state"}


def server_vars(tmp: str) -> dict[str, str]:
    """tmux and screen put their sockets in the run's private TMPDIR (with or without
    an agent home): a server started inside is the agent's, and `tmux ls` inside
    never goes looking for the user's in /tmp/tmux-UID."""
    return {"TMUX_TMPDIR": tmp, "SCREENDIR": f"{tmp}/screen"}


# Tools that find their own directory from a variable, when the profile grants that
# directory in the real HOME: pointed at it directly rather than through the agent
# home's link (Codex binds its app-server socket there, and the path through the
# agent home is longer than a socket address may be).
TOOL_HOMES = {"~/.codex": "CODEX_HOME"}


def tool_homes(granted: Iterable[tuple[str, str]], parent: Mapping[str, str]) -> dict[str, str]:
    """granted: (template, real path) of the write grants. The caller's own value wins."""
    out = {}
    for template, path in granted:
        var = TOOL_HOMES.get(template)
        if var and var not in parent:
            out[var] = path
    return out


def drop_user_servers(env: dict[str, str]) -> list[str]:
    """Remove the user's tmux/screen session variables, even when named: inside, the
    agent starts servers of its own. Returns notes."""
    notes = []
    for name, server in USER_SERVERS.items():
        if env.pop(name, None) is not None:
            notes.append(f"{name} not passed: it names your own {server} server, outside "
                         "the sandbox")
    return notes

"""The agent's own home: HOME inside the sandbox, persistent, never the user's.

An agent needs a writable HOME: shells read ~/.bashrc and keep a history, pip,
npm, cargo, go, yarn and pnpm keep caches there, tmux looks for its config. The
user's real HOME cannot be that place: ~/.bashrc runs as the user at the next
login, and an agent that writes ~/.cache/pip or ~/.npm poisons what the user
installs later. So every run gets HOME (and XDG_*) pointing at a home of its
own, kept between runs:

    $XDG_STATE_HOME/confine/homes/NAME      (~/.local/state/... of the agent's account)

NAME is per (profile, workdir): what one run writes there (rc files, caches,
git hooks directories) runs only in a later run of the same profile on the same
workdir, which the earlier run could already reach through the workdir itself.
A shared home would let an agent working on an untrusted project plant a
.bashrc or a poisoned wheel that runs in the sandbox of another project, or of
a profile with more grants (network, ~/.claude).

The home is made and checked by the agent's own uid (when confine runs as
root: a thread with the agent's file-system identity, kernel/caps.py
in_fs_identity), so nothing the agent planted there between runs can turn a
privileged operation against the host: no symlink in it is ever followed, an
existing home must be a real directory owned by that uid and not writable by
others, or the run is refused. The profile's explicit grants in the real HOME
(~/.gitconfig, ~/.claude, ~/.codex, ...) appear in the agent home as symlinks to
the granted paths; Landlock judges the target, so a link the agent plants to
~/.bashrc reaches nothing.
"""
from __future__ import annotations

import base64
import errno
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from hashlib import sha256
from typing import Any

from ..errors import ConfineError
from ..kernel import caps
from ..paths import is_under
from ..plan.identity import Identity
from ..policy import runlater
from ..policy.copied import Copied
from ..policy.model import Policy
from ..protect import copied as _copied
from ..protect.revert import remove_at
from .workdir import remove_tree

# Made if missing, never overwritten: the agent may change them (they run only inside).
BASHRC = """\
# Made by confine: the .bashrc of this agent home. It runs only inside confine
# (the next run of the same profile on the same workdir), never as you outside.
# The agent may change it; your own ~/.bashrc is not read.
case $- in *i*) ;; *) return ;; esac
HISTSIZE=10000
HISTFILESIZE=20000
HISTCONTROL=ignoreboth
shopt -s histappend checkwinsize
PS1='(confine) \\u@\\h:\\w\\$ '
"""
PROFILE = """\
# Made by confine: the .profile of this agent home (runs only inside confine).
if [ -n "$BASH_VERSION" ] && [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
"""
FILES = ((".bashrc", BASHRC), (".profile", PROFILE))
# The XDG directories (env.home_vars points at them).
DIRS = (".cache", ".config", ".local", ".local/share", ".local/state")

_COLLECT_AT_MOST = 20     # homes of vanished workdirs removed per run: bounded work
_COLLECT_EVERY = 60.0     # seconds between two collections of one homes directory
_COLLECTED: dict[tuple[int, int], float] = {}    # (dev, ino) of homes -> when collected
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def name_for(profile: str, workdir: str) -> str:
    """A readable, collision-free name: profile and workdir base names plus a hash of
    both (a profile given as a file is keyed by its real path)."""
    key = profile if "/" not in profile and not profile.endswith((".yaml", ".yml")) \
        else os.path.realpath(profile)
    digest = sha256(os.fsencode(f"{key}\0{os.path.realpath(workdir)}")).hexdigest()[:12]
    stem = os.path.basename(key).removesuffix(".yaml").removesuffix(".yml")

    def clean(s: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]", "_", s).lstrip(".")[:40] or "x"
    return f"{clean(stem)}-{clean(os.path.basename(os.path.realpath(workdir)))}-{digest}"


def state_base(identity: Identity, parent_env: Mapping[str, str]) -> str:
    """$XDG_STATE_HOME of the account the agent runs as: the caller's own variable
    only when that account is the caller (root starts agents as another account)."""
    xdg = parent_env.get("XDG_STATE_HOME", "")
    if not identity.started_as_root and os.path.isabs(xdg):
        return os.path.normpath(xdg)
    return os.path.join(identity.home, ".local", "state")


def locate(identity: Identity, profile: str, workdir: str,
           parent_env: Mapping[str, str]) -> str:
    return os.path.join(state_base(identity, parent_env), "confine", "homes",
                        name_for(profile, workdir))


def refusal(path: str, policy: Policy) -> str | None:
    """Why `path` cannot be the agent home (its place comes from $XDG_STATE_HOME,
    which the caller sets), or None."""
    real = os.path.realpath(path)
    for p in dict.fromkeys((path, real)):
        if is_under(p, policy.workdir) or is_under(policy.workdir, p):
            return (f"it overlaps the workdir {policy.workdir} (set XDG_STATE_HOME elsewhere, "
                    "or run with --no-agent-home)")
        if is_under(p, policy.tmp) or is_under(policy.tmp, p):
            return "it overlaps the run's TMPDIR"
        if runlater.system_reason(p):
            return "it lies in a system directory (set XDG_STATE_HOME elsewhere)"
        for d in policy.deny:
            if is_under(p, d.path):
                return f"it lies inside the protected secret {d.path}"
    return None


def links_for(policy: Policy, real_home: str, agent_home: str) -> list[tuple[str, str]]:
    """(path relative to the agent home, granted real path) for each explicit grant in
    the real HOME, outermost only. Never HOME itself, an ancestor of the agent home or
    confine's own state (a link there would lead the home into itself)."""
    real_home = os.path.realpath(real_home)
    confine_state = os.path.dirname(os.path.dirname(agent_home))
    want: dict[str, str] = {}
    grants = [g for g in policy.read + policy.write + policy.unix_sockets if g.source != "tmp"]
    for g in grants:
        for spelled in dict.fromkeys((os.path.normpath(_expand(g.template, real_home)), g.path)):
            if not is_under(spelled, real_home) or spelled == real_home:
                continue
            if is_under(agent_home, spelled) or is_under(spelled, confine_state):
                continue
            if not os.path.lexists(g.path):
                continue
            want.setdefault(os.path.relpath(spelled, real_home), g.path)
            break
    out: list[tuple[str, str]] = []
    for rel in sorted(want, key=lambda r: (r.count("/"), r)):
        if not any(rel == o or rel.startswith(o + "/") for o, _ in out):
            out.append((rel, want[rel]))
    return out


def _expand(template: str, home: str) -> str:
    if template == "~" or template.startswith("~/"):
        return home + template[1:]
    return template.replace("{home}", home)


class Unavailable(ConfineError):
    """The account has no place for a persistent agent home (no writable HOME, a
    read-only file system): the run gets a fresh one in its TMPDIR instead."""


def prepare(path: str, identity: Identity, links: Iterable[tuple[str, str]],
            workdir: str) -> list[str]:
    """Make or check the agent home at `path` and place the grant links; returns notes.
    Runs as the agent's uid: started as root, in a forked helper that drops to it."""
    return _as_agent(identity, _prepare, path, identity.uid, list(links), workdir)


def prepare_temporary(identity: Identity, links: Iterable[tuple[str, str]]) -> tuple[str, list[str]]:
    """A fresh agent home for one run, beside its TMPDIR (not in it: a tmpfs is
    mounted there at launch); the caller removes it afterwards."""
    path = tempfile.mkdtemp(prefix="confine-home-", dir="/tmp")
    try:
        os.chmod(path, 0o700)
        if os.geteuid() == 0:
            os.chown(path, identity.uid, identity.gid)
        return path, _as_agent(identity, _prepare_temp, path, identity.uid, list(links))
    except BaseException:
        remove_tree(path)
        raise


def _as_agent(identity: Identity, fn: Callable[..., list[str]], path: str,
              *args: Any) -> list[str]:
    """fn(path, *args) with the agent's uid, gid and no supplementary groups (for
    the file system: a thread of its own, or where that cannot be had, a forked
    helper that drops to them)."""
    if os.geteuid() != 0 or identity.uid == 0:
        try:
            return fn(path, *args)
        except OSError as e:
            raise _refuse(path, f"{e.strerror or e}"
                          + (f" ({e.filename})" if e.filename else "")) from None
    if caps.fs_identity_supported():
        # A thread with the agent's file-system identity: every path is judged as
        # the agent's (no capability overrides a mode or an owner), at a fraction
        # of a fork of this process.
        try:
            return caps.in_fs_identity(identity.uid, identity.gid, lambda: fn(path, *args))
        except OSError as e:
            raise _refuse(path, f"{e.strerror or e}"
                          + (f" ({e.filename})" if e.filename else "")) from None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the helper: never returns into the caller
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(identity.gid, identity.gid, identity.gid)
            os.setresuid(identity.uid, identity.uid, identity.uid)
            out: dict[str, object] = {"notes": fn(path, *args)}
        except ConfineError as e:
            out = {"error": str(e), "unavailable": isinstance(e, Unavailable)}
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which refuses
            out = {"error": f"{type(e).__name__}: {e}"}
        try:
            os.write(w, json.dumps(out).encode())
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    os.close(w)
    data = b""
    try:
        while chunk := os.read(r, 65536):
            data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    try:
        got = json.loads(data.decode())
    except ValueError:
        raise ConfineError(f"agent home {path}: the helper that makes it failed") from None
    if "error" in got:
        raise (Unavailable if got.get("unavailable") else ConfineError)(str(got["error"]))
    return [str(n) for n in got.get("notes", ())]


def _refuse(path: str, why: str) -> ConfineError:
    return ConfineError(f"agent home {path}: {why}; refusing to run (remove it or fix it, "
                        "confine makes a new one)")


def _check_dir(fd: int, path: str, uid: int) -> None:
    st = os.fstat(fd)
    if st.st_uid != uid:
        raise _refuse(path, f"{path} is owned by uid {st.st_uid}, not the agent's uid {uid}")
    if st.st_mode & 0o022:
        raise _refuse(path, f"{path} is writable by other users (mode "
                      f"{stat.S_IMODE(st.st_mode):o})")


def _open_or_make(dfd: int, name: str, where: str, uid: int) -> int:
    """The directory `name` below dfd, made 0700 if missing; a symlink, a file or a
    directory of another uid there is refused."""
    try:
        os.mkdir(name, 0o700, dir_fd=dfd)
    except FileExistsError:
        pass
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT):
            raise Unavailable(f"agent home: cannot make {where}: {e.strerror}") from None
        raise
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError as e:
        raise _refuse(where, f"cannot look at {where}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(where, f"{where} is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(where, f"{where} is not a directory")
    if st.st_uid != uid:
        raise _refuse(where, f"{where} is owned by uid {st.st_uid}, not the agent's uid {uid}")
    try:
        # the check above named the problem; this open is the one that holds (a swap
        # in between meets O_NOFOLLOW and the fstat below)
        fd = os.open(name, _NOFOLLOW_DIR, dir_fd=dfd)
    except OSError as e:
        raise _refuse(where, f"cannot open {where}: {e.strerror}") from None
    try:
        _check_dir(fd, where, uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _prepare(path: str, uid: int, links: list[tuple[str, str]], workdir: str) -> list[str]:
    top = os.path.dirname(os.path.dirname(os.path.dirname(path)))   # the state base
    try:
        # the account's own ~/.local/state: the user's layout (a symlinked ~/.local) is
        # followed; below it, nothing is
        os.makedirs(top, 0o700, exist_ok=True)
        base = os.path.realpath(top)
        bfd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise Unavailable(f"agent home {path}: cannot make {top}: {e.strerror}") from None
    try:
        st = os.fstat(bfd)
        if st.st_uid not in (uid, 0) or st.st_mode & 0o022:
            raise _refuse(path, f"{base} is not the agent's own directory (uid {st.st_uid}, "
                          f"mode {stat.S_IMODE(st.st_mode):o})")
        cfd = _open_or_make(bfd, "confine", os.path.join(base, "confine"), uid)
    finally:
        os.close(bfd)
    try:
        homes = os.path.join(base, "confine", "homes")
        sfd = _open_or_make(cfd, "homes", homes, uid)
    finally:
        os.close(cfd)
    try:
        name = os.path.basename(path)
        fd = _open_or_make(sfd, name, os.path.join(homes, name), uid)
        try:
            notes = _fill(fd, path, links)
        finally:
            os.close(fd)
        return notes + _record_and_collect(sfd, name, workdir)
    finally:
        os.close(sfd)


def _prepare_temp(path: str, uid: int, links: list[tuple[str, str]]) -> list[str]:
    fd = os.open(path, _NOFOLLOW_DIR)
    try:
        _check_dir(fd, path, uid)
        return _fill(fd, path, links)
    finally:
        os.close(fd)


def _record_and_collect(sfd: int, name: str, workdir: str) -> list[str]:
    """Note which workdir a home serves (`.NAME.workdir`, beside it: the agent cannot
    write there), and remove a few homes whose workdir is gone (temporary workdirs of
    an agent framework would otherwise leave one home each, forever)."""
    notes: list[str] = []
    rec = f".{name}.workdir"
    if _read_record(sfd, rec) != os.fsencode(workdir):
        try:
            fd = os.open(rec + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=sfd)
            with os.fdopen(fd, "wb") as f:
                f.write(os.fsencode(workdir))
            os.rename(rec + ".tmp", rec, src_dir_fd=sfd, dst_dir_fd=sfd)
        except OSError as e:
            return [f"agent home: could not record its workdir: {e.strerror}"]
    # Reading every other home's record costs a file per home: a program running
    # many runs (confine.Sandbox) collects at most once a minute per homes directory.
    st = os.fstat(sfd)
    key = (st.st_dev, st.st_ino)
    now = time.monotonic()
    last = _COLLECTED.get(key)
    if last is not None and now - last < _COLLECT_EVERY:
        return notes
    _COLLECTED[key] = now
    removed = 0
    for entry in sorted(os.listdir(sfd)):
        if removed >= _COLLECT_AT_MOST:
            break
        if not (entry.startswith(".") and entry.endswith(".workdir")) or entry == rec:
            continue
        other = entry[1:-len(".workdir")]
        if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", other):
            continue          # not a name confine makes (name_for): never "." or ".."
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=sfd)
            with os.fdopen(fd, "rb") as f:
                wd = os.fsdecode(f.read(8192))
            if not os.path.isabs(wd) or os.path.lexists(wd) \
                    or not os.path.isdir(os.path.dirname(wd)):
                continue      # still there, or its file system is not mounted: keep
            try:
                remove_at(sfd, other)
            except FileNotFoundError:
                pass
            os.unlink(entry, dir_fd=sfd)
            removed += 1
        except FileNotFoundError:
            continue          # another run (of this account) collected it meanwhile
        except OSError as e:
            notes.append(f"agent home {other}: not removed ({e.strerror})")
    return notes


def _read_record(sfd: int, rec: str) -> bytes | None:
    try:
        fd = os.open(rec, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=sfd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(8193)


def _fill(hfd: int, path: str, links: list[tuple[str, str]]) -> list[str]:
    notes: list[str] = []
    # The agent may have taken permissions away in its own home: what cannot be
    # made is said, not fatal (it is the agent's own home, not a protection).
    for d in DIRS:
        try:
            _walk(hfd, d.split("/"), make=True, close=True)
        except OSError as e:
            notes.append(f"agent home {path}: {d}: {e.strerror}")
    for name, text in FILES:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=hfd)
        except FileExistsError:
            continue
        except OSError as e:
            notes.append(f"agent home {path}: {name}: {e.strerror}")
            continue
        with os.fdopen(fd, "w") as f:
            f.write(text)
    for rel, target in links:
        parts = rel.split("/")
        try:
            dfd = _walk(hfd, parts[:-1], make=True, close=False)
        except OSError as e:
            notes.append(f"agent home: no link for {rel}: {e.strerror}")
            continue
        try:
            note = _place_link(dfd, parts[-1], target)
            if note:
                notes.append(f"agent home {path}: {rel}: {note}")
        except OSError as e:
            notes.append(f"agent home: no link for {rel}: {e.strerror}")
        finally:
            if dfd != hfd:
                os.close(dfd)
    return notes


def _walk(hfd: int, parts: list[str], *, make: bool, close: bool) -> int:
    """Descend `parts` below hfd without following a symlink; a symlink or a file in
    the way (the agent's) is removed and replaced by a directory."""
    fd = hfd
    for name in parts:
        try:
            nfd = os.open(name, _NOFOLLOW_DIR, dir_fd=fd)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR) or not make:
                raise
            if e.errno != errno.ENOENT:
                os.unlink(name, dir_fd=fd)
            os.mkdir(name, 0o700, dir_fd=fd)
            nfd = os.open(name, _NOFOLLOW_DIR, dir_fd=fd)
        if fd != hfd:
            os.close(fd)
        fd = nfd
    if close and fd != hfd:
        os.close(fd)
        return hfd
    return fd


def _place_link(dfd: int, name: str, target: str) -> str | None:
    """Make `name` a symlink to `target`. What the agent left there instead is moved
    aside (a tool that replaced the link by renaming a new file over it kept its
    writes there), never deleted; a note says so."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    note = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            if os.readlink(name, dir_fd=dfd) == target:
                return None
            os.unlink(name, dir_fd=dfd)
        else:
            try:
                if not stat.S_ISDIR(st.st_mode):
                    raise OSError(errno.ENOTEMPTY, "not a directory")
                os.rmdir(name, dir_fd=dfd)
            except OSError:
                aside = f"{name}.confine-displaced"
                try:
                    os.rename(name, aside, src_dir_fd=dfd, dst_dir_fd=dfd)
                except OSError as e:
                    return f"something else is there ({e.strerror}); not linked"
                note = f"what was there instead of the link is now {aside}"
    os.symlink(target, name, dir_fd=dfd)
    return note


# filesystem.copied (policy/copied.py, protect/copied.py): the agent home holds a
# regular file of its own where the real one is, so a save by a temporary file beside
# it and a rename works without the real HOME being writable; at exit it is judged
# and written back. Both sides run with the agent's identity: the real file is the
# agent account's, which may have made it a symlink to what only root may read.

def place_copies(path: str, identity: Identity,
                 copies: Sequence[Copied]) -> list[dict[str, Any]]:
    """Copy each real file into the agent home (or remove the agent's copy where
    there is none); returns the start record of each (protect/copied.read_real)."""
    got = _as_agent(identity, _place_copies, path, [(c.rel, c.path) for c in copies])
    return [json.loads(s) for s in got]


def finish_copies(path: str, identity: Identity, copies: Sequence[Copied],
                  starts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Judge each copy and write it back (protect/copied.py); one result each:
    path, action, detail, alert, and the agent's version (base64) to keep aside."""
    items = [(c.rel, c.path, list(c.protected_keys)) for c in copies]
    got = _as_agent(identity, _finish_copies, path, identity.uid, items, list(starts))
    return [json.loads(s) for s in got]


def _place_copies(path: str, items: list[tuple[str, str]]) -> list[str]:
    out: list[str] = []
    hfd = os.open(path, _NOFOLLOW_DIR)
    try:
        for rel, real in items:
            start = _copied.read_real(real)
            if "error" not in start:
                try:
                    _put_copy(hfd, rel, start)
                except OSError as e:
                    start = {"path": real, "error": f"no copy in the agent home: {e.strerror}"}
            out.append(json.dumps(start))
    finally:
        os.close(hfd)
    return out


def _put_copy(hfd: int, rel: str, start: dict[str, Any]) -> None:
    parts = rel.split("/")
    dfd = _walk(hfd, parts[:-1], make=True, close=False)
    name = parts[-1]
    try:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            os.rename(name, f"{name}.confine-displaced", src_dir_fd=dfd, dst_dir_fd=dfd)
        elif st is not None and start["data"] is None:
            os.unlink(name, dir_fd=dfd)     # no real file: the run starts without one
        if start["data"] is None:
            return
        tmp = f".{name}.confine-copy"
        try:
            os.unlink(tmp, dir_fd=dfd)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(start["data"]))
        # over a link of an earlier version (to the real file): the link itself goes
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        if dfd != hfd:
            os.close(dfd)


def _finish_copies(path: str, uid: int, items: list[tuple[str, str, list[str]]],
                   starts: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    hfd = os.open(path, _NOFOLLOW_DIR)
    try:
        for (rel, real, keys), start in zip(items, starts, strict=True):
            out.append(json.dumps({"path": real, **_finish_one(hfd, rel, real, keys, start,
                                                                 uid)}))
    finally:
        os.close(hfd)
    return out


def _finish_one(hfd: int, rel: str, real: str, keys: list[str], start: dict[str, Any],
                uid: int) -> dict[str, Any]:
    if "error" in start:
        return {"action": "left", "alert": False,
                "detail": f"not copied into the agent home ({start['error']})"}
    parts = rel.split("/")
    try:
        dfd = _walk(hfd, parts[:-1], make=False, close=False)
    except OSError:
        dfd = None
    try:
        data, why, _st = (None, None, None) if dfd is None else \
            _copied.read_regular(parts[-1], dfd)
    finally:
        if dfd is not None and dfd != hfd:
            os.close(dfd)
    if why is not None:
        return {"action": "left", "alert": True,
                "detail": f"the agent's copy is {why}: not written back"}
    old = base64.b64decode(start["data"]) if start.get("data") else None
    if data is None and old is None:
        return {"action": "unchanged", "alert": False, "detail": ""}
    if data is None:
        return {"action": "left", "alert": False, "detail": "the agent removed its copy: "
                "the real file is left as it was"}
    if data == old:
        return {"action": "unchanged", "alert": False, "detail": ""}
    aside = base64.b64encode(data).decode()
    new, why_not, reverted = _copied.judge(start, data, keys)
    if new is None:
        return {"action": "kept aside", "alert": True, "aside": aside,
                "detail": f"the agent's version is {why_not}: not written back"}
    said = (f"run-later key(s) changed by the agent put back to their start value: "
            f"{', '.join(reverted)}; the rest written back") if reverted else "written back"
    failed = _copied.write_back(real, new, start, uid)
    if failed is not None:
        return {"action": "kept aside", "alert": bool(reverted), "aside": aside,
                "detail": f"not written back: {failed}"
                + (f" (and {said.split(';')[0]})" if reverted else "")}
    return {"action": "sanitized" if reverted else ("created" if old is None else "written back"),
            "alert": bool(reverted), "detail": said}

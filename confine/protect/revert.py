"""Verify and revert: after the run, put every protected path back.

`verify_and_revert()` (at exit, and whenever the launcher wants) compares the
workdir with the snapshot and finds what was created, modified, renamed or
deleted; it restores the original, moves anything new into a quarantine
directory outside the workdir (never deletes it), strips dangerous keys from
the config of git repositories created during the run and moves their hooks
away, and returns a report.  This covers what a mount cannot: paths that did
not exist at start (`.envrc`, a nested repository made with `git init`),
protected paths that are symlinks, and hosts without namespaces, where it is
the only layer.  Threat: the agent (or what it left running) races or tricks
the reverter, so it never follows a symlink and never writes outside the
workdir except into the quarantine directory.
"""
from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass, field
from typing import Iterator

from ..paths import rel_under
from . import gitdata
from .gitconfig import is_dangerous_key, sanitize_git_config
from .report import format_report
from .snapshot import (
    _DIR,
    _FILE,
    _O_PATH,
    FILE_COPY_CAP,
    Entry,
    Root,
    Snapshot,
    _parent_of,
    _Scan,
    _Unsafe,
)

__all__ = ["Change", "Report", "verify_and_revert", "default_quarantine_dir"]

QUARANTINE_COPY_CAP = 512 << 20  # bytes copied when a move crosses filesystems


@dataclass
class Change:
    what: str          # created | modified | deleted | mode | type | new-repo | moved | unchecked | external
    path: str          # workdir-relative
    action: str        # quarantined | restored | sanitized | kept | left | failed | noted
    detail: str = ""
    quarantine: str | None = None
    alert: bool = True


@dataclass
class Report:
    changes: list[Change] = field(default_factory=list)
    quarantine_dir: str | None = None
    namespaces_active: bool = False
    seconds: float = 0.0

    @property
    def alerts(self) -> list[Change]:
        return [c for c in self.changes if c.alert]

    @property
    def failed(self) -> list[Change]:
        return [c for c in self.changes if c.action == "failed"]

    def __bool__(self) -> bool:
        return bool(self.alerts)


def default_quarantine_dir(run_id: str, *, euid: int | None = None, home: str | None = None) -> str:
    """/var/lib/confine/quarantine/RUN as root, else
    $XDG_STATE_HOME (~/.local/state)/confine/quarantine/RUN."""
    if (os.geteuid() if euid is None else euid) == 0:
        return os.path.join("/var/lib/confine/quarantine", run_id)
    base = os.environ.get("XDG_STATE_HOME") if home is None else None
    if not base or not os.path.isabs(base):
        base = os.path.join(home or os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "confine", "quarantine", run_id)


class _Quarantine:
    def __init__(self, path: str, workdir: str):
        rp = os.path.realpath(path)
        w = workdir.rstrip("/")
        if rp == w or rp.startswith(w + "/"):
            raise ValueError(f"quarantine directory {path} lies inside the workdir")
        self.path = rp
        self.fd: int | None = None
        self.copied = 0

    def _open(self) -> int:
        if self.fd is None:
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            self.fd = os.open(self.path, _DIR)
            st = os.fstat(self.fd)
            if st.st_uid != os.geteuid():
                raise OSError(errno.EPERM, f"quarantine directory {self.path} is not ours")
            os.fchmod(self.fd, 0o700)
        return self.fd

    def slot(self, rel: str) -> tuple[int, str, str]:
        """(parent fd, name, full path) of a free place for rel; caller closes the fd."""
        cur = os.dup(self._open())
        comps = rel.split("/")
        try:
            for c in comps[:-1]:
                try:
                    os.mkdir(c, 0o700, dir_fd=cur)
                except FileExistsError:
                    pass
                nxt = os.open(c, _DIR, dir_fd=cur)
                os.close(cur)
                cur = nxt
            name, n = comps[-1], 0
            while True:
                cand = name if n == 0 else f"{name}.{n}"
                try:
                    os.stat(cand, dir_fd=cur, follow_symlinks=False)
                except FileNotFoundError:
                    break
                n += 1
            return cur, cand, os.path.join(self.path, *comps[:-1], cand)
        except BaseException:
            os.close(cur)
            raise

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _copy_out(spfd: int, sname: str, dpfd: int, dname: str, q: _Quarantine, level: int = 0) -> None:
    st = os.stat(sname, dir_fd=spfd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(sname, dir_fd=spfd), dname, dir_fd=dpfd)
    elif stat.S_ISDIR(st.st_mode):
        if level > 256:
            raise OSError(errno.ELOOP, "nested too deep to copy")
        os.mkdir(dname, 0o700, dir_fd=dpfd)
        sfd = os.open(sname, _DIR, dir_fd=spfd)
        try:
            dfd = os.open(dname, _DIR, dir_fd=dpfd)
            try:
                for e in os.scandir(sfd):
                    _copy_out(sfd, e.name, dfd, e.name, q, level + 1)
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)
    elif stat.S_ISREG(st.st_mode):
        sfd = os.open(sname, _FILE, dir_fd=spfd)
        try:
            dfd = os.open(dname, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                          0o600, dir_fd=dpfd)
            try:
                while q.copied < QUARANTINE_COPY_CAP:
                    b = os.read(sfd, min(1 << 20, QUARANTINE_COPY_CAP - q.copied))
                    if not b:
                        break
                    os.write(dfd, b)
                    q.copied += len(b)
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)
    else:
        fd = os.open(dname + ".special", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o600, dir_fd=dpfd)
        try:
            os.write(fd, f"mode {st.st_mode:o}: not a file, directory or symlink\n".encode())
        finally:
            os.close(fd)


def _remove_at(pfd: int, name: str, level: int = 0) -> None:
    st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=pfd)
        return
    if level > 256:
        raise OSError(errno.ELOOP, "nested too deep to remove")
    fd = os.open(name, _DIR, dir_fd=pfd)
    try:
        for e in list(os.scandir(fd)):
            _remove_at(fd, e.name, level + 1)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=pfd)


class _Reverter:
    def __init__(self, snap: Snapshot, cur: _Scan, q: _Quarantine, report: Report):
        self.snap = snap
        self.cur = cur
        self.fs = cur.fs
        self.q = q
        self.report = report
        self.is_root = os.geteuid() == 0

    def add(self, *a, **kw) -> Change:
        c = Change(*a, **kw)
        self.report.changes.append(c)
        return c

    def quarantine(self, rel: str) -> str:
        pfd, name = self.fs.parent(rel)
        try:
            qpfd, qname, qpath = self.q.slot(rel)
            try:
                try:
                    os.rename(name, qname, src_dir_fd=pfd, dst_dir_fd=qpfd)
                except OSError as e:
                    if e.errno != errno.EXDEV:
                        raise
                    _copy_out(pfd, name, qpfd, qname, self.q)
                    _remove_at(pfd, name)
            finally:
                os.close(qpfd)
        finally:
            os.close(pfd)
        return qpath

    def keep_copy(self, rel: str, data: bytes) -> str:
        """Put `data` into quarantine under rel's name.  Not keep_current: the
        bytes kept must be the ones that were read and checked, not whatever
        the file holds by the time it is copied (nor capped by the quarantine's
        copy budget)."""
        qpfd, qname, qpath = self.q.slot(rel)
        try:
            fd = os.open(qname, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=qpfd)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        finally:
            os.close(qpfd)
        return qpath

    def keep_current(self, rel: str) -> str:
        """Copy the current content of a file into quarantine (no move)."""
        pfd, name = self.fs.parent(rel)
        try:
            qpfd, qname, qpath = self.q.slot(rel)
            try:
                _copy_out(pfd, name, qpfd, qname, self.q)
            finally:
                os.close(qpfd)
        finally:
            os.close(pfd)
        return qpath

    def rewrite_in_place(self, rel: str, e: Entry) -> None:
        """Truncate and rewrite the file that is there (same inode as e)."""
        pfd, name = self.fs.parent(rel)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=pfd)
        finally:
            os.close(pfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (e.dev, e.ino):
                raise OSError(errno.ESTALE, "replaced while being restored")
            os.ftruncate(fd, 0)
            view = memoryview(e.data or b"")
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, e.mode)
        finally:
            os.close(fd)

    def _own(self, fd: int, uid: int, gid: int) -> None:
        if self.is_root:
            os.fchown(fd, uid, gid)

    def write_file(self, rel: str, data: bytes, mode: int, uid: int, gid: int) -> None:
        """Atomically put `data` at rel (temp file in the same directory + rename)."""
        pfd, name = self.fs.parent(rel, create=True)
        try:
            tmp = f".confine-restore-{os.getpid()}-{time.monotonic_ns()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=pfd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                self._own(fd, uid, gid)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            try:
                os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
            except OSError:
                os.unlink(tmp, dir_fd=pfd)
                raise
        finally:
            os.close(pfd)

    def chmod(self, rel: str, e: Entry) -> None:
        pfd, name = self.fs.parent(rel)
        try:
            fd = os.open(name, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
            try:
                st = os.fstat(fd)
                if stat.S_ISLNK(st.st_mode):
                    raise OSError(errno.ELOOP, "became a symlink")
                os.chmod(f"/proc/self/fd/{fd}", e.mode)
            finally:
                os.close(fd)
        finally:
            os.close(pfd)

    def restore(self, rel: str, e: Entry) -> str:
        """Recreate a snapshot entry at rel (nothing may be there). Returns a note."""
        if e.kind == "f":
            if e.data is None:
                raise OSError(errno.ENODATA, "no copy kept (too large or unreadable at start)")
            self.write_file(rel, e.data, e.mode, e.uid, e.gid)
        elif e.kind == "d":
            pfd, name = self.fs.parent(rel, create=True)
            try:
                os.mkdir(name, 0o700, dir_fd=pfd)
                fd = os.open(name, _DIR, dir_fd=pfd)
                try:
                    self._own(fd, e.uid, e.gid)
                    os.fchmod(fd, e.mode)
                finally:
                    os.close(fd)
            finally:
                os.close(pfd)
        elif e.kind == "l":
            if e.target is None:
                raise OSError(errno.ENODATA, "symlink target unknown")
            pfd, name = self.fs.parent(rel, create=True)
            try:
                os.symlink(e.target, name, dir_fd=pfd)
                if self.is_root:
                    os.chown(name, e.uid, e.gid, dir_fd=pfd, follow_symlinks=False)
            finally:
                os.close(pfd)
        else:
            raise OSError(errno.EOPNOTSUPP, "was not a file, directory or symlink")
        return "restored"


def _differs(a: Entry, b: Entry) -> str | None:
    """None if b (now) matches a (snapshot); else "type", "content", "target" or "mode"."""
    if a.kind != b.kind:
        return "type"
    if a.kind == "f":
        if a.size != b.size:
            return "content"
        if (a.dev, a.ino, a.ctime_ns) != (b.dev, b.ino, b.ctime_ns):
            if a.sha256 is None or b.sha256 is None or a.sha256 != b.sha256:
                return "content"
    if a.kind == "l" and a.target != b.target:
        return "target"
    if a.mode != b.mode:
        return "mode"
    return None


def verify_and_revert(snap: Snapshot, *, quarantine_dir: str | None = None,
                      trust_mounts: bool = False, home: str | None = None) -> Report:
    """Compare the workdir with `snap`, put protected paths back, report.

    Supervisor side; call it after the agent and everything it left running
    are gone (and, if wanted, periodically while it runs: then it races the
    agent and is best-effort).  Never follows a symlink, never writes outside
    the workdir except into the quarantine directory (default:
    default_quarantine_dir(snap.run_id)), never deletes: whatever it removes
    from the workdir is moved there.

    trust_mounts=True (pass it only when the namespace step ran in the child
    with snap.mount_plan, and snap.mount_plan.complete): paths under the
    read-only binds cannot have been changed by the agent, so changes found
    there came from outside the sandbox (the person's editor, say) and are
    reported, not reverted.

    Returns a Report; `report.alerts` is what the launcher must print
    (format_report) and turn into a distinct outcome.
    """
    t0 = time.monotonic()
    report = Report(namespaces_active=trust_mounts)
    q = _Quarantine(quarantine_dir or default_quarantine_dir(snap.run_id, home=home), snap.workdir)
    report.quarantine_dir = q.path
    cur = _Scan(snap.workdir, snap.patterns, copy=False, prev=snap, extra=snap.extra,
                    global_hooks=snap.global_hooks, parse_configs=False)
    try:
        cur.walk()
        rv = _Reverter(snap, cur, q, report)
        _revert(snap, cur, rv, trust_mounts and snap.mount_plan.complete)
        gitdata.check_modes(snap, cur, rv)      # chmod 0777 . .git (issue 10, item 7)
        gitdata.check(snap, cur, rv, _quarantine)  # index, commits, replace refs (item 5)
        for n in cur.notes:
            report.changes.append(Change("unchecked", n.split(":", 1)[0], "noted",
                                         n.split(":", 1)[-1].strip()))
    finally:
        cur.fs.close()
        q.close()
    if any(c.quarantine for c in report.changes):
        try:
            with open(os.path.join(q.path, "REPORT.txt"), "a") as f:
                f.write(format_report(report) + "\n")
        except OSError:
            pass
    report.seconds = time.monotonic() - t0
    return report


def _revert(snap: Snapshot, cur: _Scan, rv: _Reverter, trusted_mode: bool) -> None:
    # --- directories (git directories, protected trees) renamed during the run,
    #     recognised by inode, so a renamed repository is not taken for a new one
    snap_anchor: dict[tuple[int, int], str] = {(g.dev, g.ino): rel for rel, g in snap.gitdirs.items()}
    for rel in snap.roots:
        e = snap.entries.get(rel)
        if e is not None and e.kind == "d":
            snap_anchor[(e.dev, e.ino)] = rel
    cur_anchor: dict[str, tuple[int, int]] = {rel: (g.dev, g.ino) for rel, g in cur.gitdirs.items()}
    for rel in cur.roots:
        e = cur.entries.get(rel)
        if e is not None and e.kind == "d":
            cur_anchor[rel] = (e.dev, e.ino)
    moved: dict[str, str] = {}                  # current rel -> snapshot rel
    for rel, ino in cur_anchor.items():
        old = snap_anchor.get(ino)
        if old is not None and old != rel and cur_anchor.get(old) != ino:
            moved[rel] = old
    for rel in sorted(moved, key=len):          # keep the outermost of nested moves
        for other in [o for o in moved if o != rel and rel_under(o, rel)]:
            if rel in moved and moved[other] == moved[rel] + other[len(rel):]:
                del moved[other]
    back = {old: new for new, old in moved.items()}

    def to_snap(rel: str) -> str:
        for new in sorted(moved, key=len, reverse=True):
            if rel_under(rel, new):
                return moved[new] + rel[len(new):]
        return rel

    def to_cur(srel: str) -> str:
        for old in sorted(back, key=len, reverse=True):
            if rel_under(srel, old):
                return back[old] + srel[len(old):]
        return srel

    for new, old in sorted(moved.items()):
        rv.add("moved", new, "noted", f"was {old} (same directory, renamed during the run)",
               alert=False)

    cur_by_snap = {to_snap(rel): rel for rel in cur.entries}
    new_gitdirs = {rel for rel in cur.gitdirs if to_snap(rel) not in snap.gitdirs}

    def trusted(srel: str) -> bool:
        """Under a read-only bind that the agent could not write through.  The
        bind sits on the root's directory entry: if that entry now holds
        another inode (replaced on the host by rename, e.g. `git config` run
        outside), the kernel detached the agent's bind then, so trust ends."""
        if not trusted_mode:
            return False
        for r in _roots_covering(snap.roots, srel):
            if r.trusted and (r.tree or r.rel == srel):
                old = snap.entries.get(r.rel)
                now = cur.entries.get(to_cur(r.rel))
                return (old is not None and now is not None and old.kind == now.kind
                        and (old.dev, old.ino) == (now.dev, now.ino))
        return False

    handled: list[str] = []                     # current rels moved away (skip what is below)

    def below_handled(rel: str) -> bool:
        return any(rel_under(rel, h) for h in handled)

    # --- 1. created or changed, outermost first ----------------------------------
    todo = sorted((rel for rel, e in cur.entries.items()
                   if to_snap(rel) not in snap.entries
                   or _differs(snap.entries[to_snap(rel)], e) is not None),
                  key=lambda k: (k.count("/"), k))
    for rel in todo:
        if below_handled(rel):
            continue
        now = cur.entries[rel]
        srel = to_snap(rel)
        old = snap.entries.get(srel)
        if old is None:                                         # created
            if trusted(srel):
                rv.add("external", rel, "left", "created under a read-only bind, so not by the "
                       "agent", alert=False)
                continue
            root = cur.roots.get(now.root)
            gd = root.gitdir if root is not None else None
            if gd is not None and gd in new_gitdirs:
                _new_repo_entry(rv, cur, rel, now, gd, handled)
                continue
            if root is not None and rel == root.rel and root.why.startswith("gitdir pointer"):
                target = cur.pointers.get(rel)
                if target is not None and target in cur.gitdirs:
                    rv.add("created", rel, "kept", f"links to the git directory {target} in the "
                           "workdir, which is checked as well", alert=False)
                    continue
            _quarantine(rv, rel, "created", handled)
            continue
        how = _differs(old, now)
        if trusted(srel):
            rv.add("external", rel, "left", f"{how} changed under a read-only bind, so not by "
                   "the agent", alert=False)
            continue
        if how == "mode":
            try:
                rv.chmod(rel, old)
                rv.add("mode", rel, "restored", f"mode {now.mode:o} -> {old.mode:o}")
            except (OSError, _Unsafe) as ex:
                rv.add("mode", rel, "failed", f"cannot restore mode {old.mode:o}: {_why(ex)}")
            continue
        what = "type" if how == "type" else "modified"
        if how == "content" and (old.dev, old.ino) == (now.dev, now.ino) and old.data is not None:
            # Same inode, new content: put the content back in place.  Replacing
            # the directory entry would detach a read-only bind that the agent's
            # mount namespace may hold on it.
            try:
                qpath = rv.keep_current(rel)
                rv.rewrite_in_place(rel, old)
                rv.add(what, rel, "restored", "original content put back (in place), the "
                       "changed content kept", quarantine=qpath)
                continue
            except (OSError, _Unsafe):
                pass  # e.g. a read-only file we may not open for writing: replace it instead
        qpath = _quarantine(rv, rel, what, handled, report=False)
        if qpath is None:
            continue
        try:
            rv.restore(rel, old)
            rv.add(what, rel, "restored", "original put back, the changed one moved away",
                   quarantine=qpath)
        except (OSError, _Unsafe) as ex:
            rv.add(what, rel, "failed", f"moved away, but the original cannot be put back: "
                   f"{_why(ex)}", quarantine=qpath)

    # --- 2. deleted (including what was below entries put back above) ----------
    gone_gitdirs = {g for g in snap.gitdirs if g and g not in back and g not in cur.gitdirs}
    for srel in sorted((s for s in snap.entries if s not in cur_by_snap),
                       key=lambda k: (k.count("/"), k)):
        rel = to_cur(srel)
        if trusted(srel):
            if srel in snap.roots:
                rv.add("external", rel, "left", "gone from under a read-only bind: renamed or "
                       "removed outside the sandbox", alert=False)
            continue
        parent = _parent_of(rel)
        pst = rv.fs.lstat(parent)
        if pst is None or not stat.S_ISDIR(pst.st_mode):
            sp = _parent_of(srel)
            if sp not in snap.entries and sp not in gone_gitdirs:
                rv.add("deleted", rel, "noted", f"{parent or '.'} is gone as well: not recreated",
                       alert=False)
            continue
        if rv.fs.lstat(rel) is not None:
            continue
        try:
            rv.restore(rel, snap.entries[srel])
            rv.add("deleted", rel, "restored", "recreated from the snapshot")
        except (OSError, _Unsafe) as ex:
            rv.add("deleted", rel, "failed", f"cannot recreate: {_why(ex)}")

    # --- 3. git directories that vanished -----------------------------------------
    for g in sorted(gone_gitdirs):
        rv.add("deleted", g, "noted", "git directory removed or moved out of the workdir: "
               "nothing left there to run", alert=False)


def _roots_covering(roots: dict[str, Root], rel: str) -> Iterator[Root]:
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        r = roots.get("/".join(parts[:i]))
        if r is not None:
            yield r


def _why(ex: BaseException) -> str:
    if isinstance(ex, _Unsafe):
        return "a component of the path is a symlink or not a directory"
    if isinstance(ex, OSError):
        return ex.strerror or str(ex)
    return str(ex)


def _quarantine(rv: _Reverter, rel: str, what: str, handled: list[str],
                report: bool = True, detail: str = "") -> str | None:
    try:
        qpath = rv.quarantine(rel)
    except (OSError, _Unsafe) as ex:
        rv.add(what, rel, "failed", f"cannot move to quarantine: {_why(ex)}")
        return None
    handled.append(rel)
    if report:
        rv.add(what, rel, "quarantined", detail, quarantine=qpath)
    return qpath


def _new_repo_entry(rv: _Reverter, cur: _Scan, rel: str, e: Entry, gd: str,
                    handled: list[str]) -> None:
    """A protected entry of a git directory created during the run: keep the
    repository usable but harmless."""
    sub = rel[len(gd) + 1:] if gd else rel
    if sub in ("config", "config.worktree") and e.kind == "f":
        try:
            pfd, name = rv.fs.parent(rel)
            try:
                data = rv.fs.read_file(pfd, name, os.stat(name, dir_fd=pfd, follow_symlinks=False),
                                       FILE_COPY_CAP * 4)
            finally:
                os.close(pfd)
        except (OSError, _Unsafe):
            data = None
        if data is None:
            _quarantine(rv, rel, "new-repo", handled, detail="unreadable or too large config")
            return
        new, removed, err = sanitize_git_config(data)
        if not removed and err is None:
            return  # nothing but safe keys: leave it alone, say nothing
        try:
            qpath = rv.keep_copy(rel, data)
            rv.write_file(rel, new, e.mode, e.uid, e.gid)
        except (OSError, _Unsafe) as ex:
            _quarantine(rv, rel, "new-repo", handled, detail=f"cannot rewrite it ({_why(ex)})")
            return
        danger = [it.name for it in removed if is_dangerous_key(it)]
        other = [it.name for it in removed if not is_dangerous_key(it)]
        parts = []
        if danger:
            parts.append("removed " + ", ".join(danger) + " (run programs)")
        if other:
            parts.append("removed " + ", ".join(other) + " (not on the safe list)")
        if err:
            parts.append(f"dropped the rest: {err}")
        rv.add("new-repo", rel, "sanitized", "; ".join(parts), quarantine=qpath,
               alert=bool(danger) or bool(err))
        return
    if sub == "hooks" and e.kind == "d":
        return  # the directory stays; its entries are looked at one by one
    if sub.startswith("hooks/"):
        name = rel.rsplit("/", 1)[-1]
        if e.kind == "f" and name.endswith(".sample") and sub.count("/") == 1:
            return  # git never runs *.sample
        _quarantine(rv, rel, "new-repo", handled, detail="hook in a repository created during "
                    "the run")
        return
    if sub == "commondir" and e.kind == "f":
        try:
            pfd, name = rv.fs.parent(rel)
            try:
                data = rv.fs.read_file(pfd, name, os.stat(name, dir_fd=pfd, follow_symlinks=False),
                                       4096)
            finally:
                os.close(pfd)
        except (OSError, _Unsafe):
            data = None
        t = cur._inside(data.decode("utf-8", "surrogateescape").strip(), gd) if data else None
        if t is not None and t in cur.gitdirs:
            return
        _quarantine(rv, rel, "new-repo", handled, detail="commondir pointing outside the workdir")
        return
    _quarantine(rv, rel, "new-repo", handled, detail="protected path in a repository created "
                "during the run")

"""The supervisor's side: keeps a workdir file before the broker changes it.

Job: one thread per run serves the broker's requests (client.py), one at a
time, in order: is the file one the workdir held at the start (its birth
time before the run began)? Is this path's start version kept already (only
the first change of a path matters)? Then a hard link to the very inode in
the run's undo area (store.py) where it is on the same mount, else a copy
within the run's bound; a truncation, a write in place, a rename away or a
file with other names is always a copy (a link would share later changes).
Directories, symlinks and FIFOs are kept as what remakes them (mode, owner,
times, target). Deletions and overwrites are counted; above
`approvals.deletions.ask_above` the person is asked once (through the run's approval engine): refused,
this and every later one fail with EACCES and what was deleted so far is
put back (restore.py); allowed, nothing more is asked for the run.

Threat: the agent names the paths and races the calls. The broker pins the
file (an O_PATH descriptor) before asking, so what is kept is the inode the
call then removes; the link is made from the supervisor's own view of the
workdir, walked one component at a time without following a symlink, and
only if it reaches that same inode (else a copy, from the pinned descriptor).
What does not fit (the bound, a device node, an error) is counted and said
at exit in one line, never dropped unseen. A failure of the keeper itself
refuses the call (fail closed).
"""
from __future__ import annotations

import errno
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import default_warn, printable
from ..paths import is_under
from ..protect import keep
from ..protect.held import MANIFEST
from . import store

OPS = frozenset({"unlink", "rmdir", "rename-over", "rename-away", "truncate", "write", "forget"})
# The largest file copied before a write in place (no O_TRUNC): most such
# opens append to a log or rewrite a database; a bigger one is said, not kept.
WRITE_COPY_CAP = 64 << 20
LEFT_LISTED = 1000            # paths not kept, listed in the manifest (all are counted)
Ask = Callable[[int, list[str]], bool]


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    return None


class Keeper:
    """One run's keeper. limit: bytes the run may keep (keep.limits()); judge, ask:
    approvals.deletions (judge(count, rel): "allow", "ask" or "deny" for the count-th
    deletion or overwrite of a start file, at `rel` in the workdir; ask(count, sample):
    the person's answer; None: never judged). ask_above: the threshold, for messages."""

    def __init__(self, run_id: str, workdir: str, *, limit: int, ask_above: int | None = None,
                 ask: Ask | None = None, judge: Callable[[int, str], str] | None = None,
                 events: Any = None, where: str | None = None,
                 warn: Callable[[str], None] = default_warn):
        self.run_id = run_id
        self.workdir = os.path.realpath(workdir)
        self.base = where or store.base()
        self.limit = limit
        self.ask_above, self.ask = ask_above, ask
        if judge is None and ask_above is not None:
            def judge(count: int, rel: str) -> str:
                return "ask" if count > ask_above else "allow"
        self.judge = judge
        self.events = events
        self.warn = warn
        self.started_ns = time.time_ns()
        # the workdir in the supervisor's own view: links are made from here
        self.wfd = os.open(self.workdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dfd: int | None = None         # the run's directory in the store
        self.ffd: int | None = None         # ... its files/
        self.efd: int | None = None         # ... its entries.jsonl
        self.entries: dict[str, dict[str, Any]] = {}
        self.dirs_seen: set[tuple[int, int]] = set()
        self.bytes = 0
        self.count = 0                      # deletions and overwrites of start files
        self.allowed = False
        self.denied: str | None = None
        self.put_back: set[tuple[int, int]] = set()    # files a refusal put back
        self.left: list[str] = []
        self.left_count = 0
        self.left_bytes = 0
        self.seq = 0
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.broken = ""                    # why the store could not be made

    # ---------------------------------------------------------------- serving

    def serve(self, sock: socket.socket) -> None:
        self.thread = threading.Thread(target=self._loop, args=(sock,), name="confine-undo",
                                       daemon=True)
        self.thread.start()

    def _loop(self, sock: socket.socket) -> None:
        try:
            while True:
                try:
                    msg, fds, _, _ = socket.recv_fds(sock, 65536, 2)
                except OSError:
                    return
                if not msg:
                    for f in fds:
                        os.close(f)
                    return
                try:
                    rep = self._handle(msg, fds)
                except Exception as e:  # noqa: BLE001 - refuse, never pass what was not kept
                    if os.environ.get("CONFINE_DEBUG"):
                        import traceback
                        traceback.print_exc()
                    rep = b"deny:undo: the keeper failed (" + str(e).encode()[:200] + b"): refused"
                finally:
                    for f in fds:
                        os.close(f)
                try:
                    sock.send(rep)
                except OSError:
                    return
        finally:
            sock.close()

    def _handle(self, msg: bytes, fds: list[int]) -> bytes:
        req = json.loads(msg)
        op, rel = req.get("op"), req.get("path")
        if op not in OPS or not isinstance(rel, str) or not rel:
            return b"deny:undo: a request the keeper does not know: refused"
        with self.lock:
            if op == "forget":
                self._forget(rel)
                return b"ok"
            if len(fds) != 2:
                return b"deny:undo: a request without its file: refused"
            vfd, pfd = fds
            parent = rel.rpartition("/")[0]
            if parent:
                # before anything in it changes: its mode and times as at the start
                self._note_dir(pfd, parent)
            st = os.fstat(vfd)
            born = store.birth_ns(vfd)
            new = (born is not None and born >= self.started_ns
                   and (st.st_dev, st.st_ino) not in self.put_back)
            kind = _kind(st.st_mode)
            counted = op in store.COUNTED and kind != "dir"
            if counted and self.denied and not new:
                return b"deny:" + self.denied.encode()    # a start file, kept before or not
            old = self.entries.get(rel)
            if old is not None:
                if op == "rmdir" and old["op"] == "parent":
                    self._forget(rel)
                    self._write(dict(old, op="rmdir"))
                return b"ok"                # its start version is kept already
            if new:
                return b"ok"                # made during the run
            if counted:
                verdict = "allow" if self.judge is None or self.allowed \
                    else self.judge(self.count + 1, rel)
                if verdict == "deny":
                    # a rule refuses this very path: this call only, nothing put back
                    self._emit({"action": "refused", "path": rel, "count": self.count + 1})
                    return (b"deny:undo: deleting or overwriting " + printable(rel).encode()
                            + b" is refused by approvals.deletions")
                if verdict == "ask" and not self._approve(rel):
                    return b"deny:" + (self.denied or "undo: refused").encode()
                self.count += 1
            return b"kept" if self._keep(op, rel, vfd, st, kind) else b"ok"

    # ---------------------------------------------------------------- approvals

    def _approve(self, rel: str) -> bool:
        """Ask once; refused: every later deletion is refused too and those of
        the run so far are put back."""
        sample = [p for p, e in self.entries.items() if e["op"] in store.COUNTED][:4] + [rel]
        n = self.count + 1
        try:
            ok = bool(self.ask(n, sample)) if self.ask is not None else False
        except Exception:  # noqa: BLE001 - an approver that fails refuses
            ok = False
        self._emit({"action": "asked", "count": n, "threshold": self.ask_above,
                    "paths": sample, "allowed": ok})
        if ok:
            self.allowed = True
            return True
        from .restore import restore
        put = restore(self.dfd, list(self.entries.values()), self.workdir,
                      ended_ns=time.time_ns(), ops=store.COUNTED) if self.dfd is not None else None
        back = put.restored if put is not None else 0
        if put is not None:
            self.put_back.update(put.made)
        self.denied = ("undo: deleting or overwriting files that existed at the start "
                       f"({printable(rel)}, the {n}th) was not approved (approvals.deletions): "
                       f"refused for the rest of the run; {back} put back")
        self._emit({"action": "put back", "count": back,
                    "skipped": put.skipped[:20] if put is not None else []})
        return False

    # ---------------------------------------------------------------- keeping

    def _dirs(self) -> tuple[int, int]:
        """The run's directory and its files/, made at the first file kept."""
        if self.dfd is not None and self.ffd is not None:
            return self.dfd, self.ffd
        if self.broken:
            raise OSError(errno.EIO, self.broken)
        try:
            real = os.path.realpath(self.base)
            if is_under(real, self.workdir):
                raise OSError(errno.EPERM, f"the undo store {self.base} lies inside the workdir")
            os.makedirs(self.base, mode=0o700, exist_ok=True)
            bfd = os.open(self.base, store.DIR_FLAGS)
            try:
                if os.fstat(bfd).st_uid != os.geteuid():
                    raise OSError(errno.EPERM, f"{self.base} is not ours")
                os.mkdir(self.run_id, 0o700, dir_fd=bfd)
                dfd = os.open(self.run_id, store.DIR_FLAGS, dir_fd=bfd)
            finally:
                os.close(bfd)
            os.mkdir(store.FILES, 0o700, dir_fd=dfd)
            self.ffd = os.open(store.FILES, store.DIR_FLAGS, dir_fd=dfd)
            self.dfd = dfd
            self._manifest(None)
            self.efd = os.open(store.ENTRIES, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
                               | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        except OSError as e:
            self.broken = f"the undo store could not be made in {self.base}: {e.strerror or e}"
            raise OSError(errno.EIO, self.broken) from None
        return self.dfd, self.ffd

    def _manifest(self, ended_ns: int | None) -> None:
        assert self.dfd is not None
        store.write_json(self.dfd, MANIFEST, {
            "version": 1, "run": self.run_id, "workdir": self.workdir,
            "started": self.started_ns / 1e9, "ended_ns": ended_ns,
            "ended": ended_ns / 1e9 if ended_ns is not None else None,
            "counted": self.count, "denied": self.denied, "not_kept_count": self.left_count,
            "not_kept": self.left[:LEFT_LISTED]})

    def _write(self, e: dict[str, Any]) -> None:
        self._dirs()
        assert self.efd is not None
        os.write(self.efd, (json.dumps(e, separators=(",", ":")) + "\n").encode())
        if not e.get("forget"):
            self.entries[e["path"]] = e

    def _forget(self, rel: str) -> None:
        e = self.entries.pop(rel, None)
        if e is None:
            return
        if e.get("op") in store.COUNTED and e.get("kind") != "dir" and self.count:
            self.count -= 1
        if e.get("store") and self.ffd is not None:
            try:
                os.unlink(e["store"], dir_fd=self.ffd)
            except OSError:
                pass
            self.bytes -= int(e.get("cost", 0))
        self._write({"forget": True, "path": rel})

    def _note_dir(self, pfd: int, rel: str) -> None:
        """The directory of a kept file, as it was before its first change (so
        `undo` gives back its mode and times too)."""
        st = os.fstat(pfd)
        ident = (st.st_dev, st.st_ino)
        if ident in self.dirs_seen or rel in self.entries:
            return
        self.dirs_seen.add(ident)
        born = store.birth_ns(pfd)
        if born is not None and born >= self.started_ns:
            return                          # made during the run: nothing to give back
        try:
            self._write(self._meta(rel, "parent", "dir", st))
        except OSError:
            pass

    @staticmethod
    def _meta(rel: str, op: str, kind: str, st: os.stat_result) -> dict[str, Any]:
        return {"path": rel, "op": op, "kind": kind, "mode": stat.S_IMODE(st.st_mode),
                "uid": st.st_uid, "gid": st.st_gid, "mtime_ns": st.st_mtime_ns,
                "atime_ns": st.st_atime_ns, "size": st.st_size, "time": round(time.time(), 3)}

    def _not_kept(self, rel: str, why: str, size: int = 0) -> None:
        self.left_count += 1
        self.left_bytes += size
        if len(self.left) < LEFT_LISTED:
            self.left.append(f"{rel}: {why}")
        self._emit({"action": "not kept", "path": rel, "why": why})

    def _keep(self, op: str, rel: str, vfd: int, st: os.stat_result, kind: str | None) -> bool:
        """True: an entry was written for rel now."""
        if kind is None:
            self._not_kept(rel, "a device node or socket (not kept)")
            return False
        e = self._meta(rel, op, kind, st)
        try:
            if kind == "file":
                if not self._store(op, rel, vfd, st, e):
                    return False
            elif kind == "symlink":
                e["target"] = os.fsdecode(os.readlink(b"", dir_fd=vfd))
            self._write(e)
        except OSError as err:
            self._not_kept(rel, err.strerror or str(err), st.st_size)
            return False
        self._emit({"action": e.get("how", "kept"), "path": rel, "op": op, "type": kind})
        return True

    def _store(self, op: str, rel: str, vfd: int, st: os.stat_result, e: dict[str, Any]) -> bool:
        if op == "write" and st.st_size > WRITE_COPY_CAP:
            self._not_kept(rel, f"written in place and larger than {keep.human(WRITE_COPY_CAP)}",
                           st.st_size)
            return False
        _, ffd = self._dirs()
        self.seq += 1
        name = f"{self.seq:08d}"
        how = None
        cost = 0
        # A link only where the call takes the inode's last name: anything still
        # reachable (a rename away, another hard link) can be written after, and
        # the kept version with it.
        if op in ("unlink", "rename-over") and st.st_nlink == 1:
            cost = st.st_blocks * 512
            if self.bytes + cost > self.limit:
                self._over(rel, st.st_size)
                return False
            hfd = self._host_fd(rel, st)
            if hfd is not None:
                try:
                    os.link(f"/proc/self/fd/{hfd}", name, dst_dir_fd=ffd)
                    how = "link"
                except OSError:
                    pass
                finally:
                    os.close(hfd)
        if how is None:
            cost = self._copy(vfd, ffd, name, self.limit - self.bytes)
            if cost < 0:
                self._over(rel, st.st_size)
                return False
            how = "copy"
        self.bytes += cost
        e.update(store=name, how=how, cost=cost)
        return True

    def _over(self, rel: str, size: int) -> None:
        self._not_kept(rel, f"over the {keep.human(self.limit)} a run may keep for undo "
                            f"({keep.BYTES_ENV})", size)

    def _host_fd(self, rel: str, st: os.stat_result) -> int | None:
        """The same inode, reached from the supervisor's own view of the workdir
        (a link must be made on one mount), never through a symlink."""
        comps = [os.fsencode(c) for c in rel.split("/")]
        cur = os.dup(self.wfd)
        try:
            for c in comps[:-1]:
                nxt = os.open(c, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=cur)
                os.close(cur)
                cur = nxt
            fd = os.open(comps[-1], os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
        except OSError:
            return None
        finally:
            os.close(cur)
        got = os.fstat(fd)
        if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            return None
        return fd

    @staticmethod
    def _copy(vfd: int, ffd: int, name: str, room: int) -> int:
        """Copy the pinned file into files/name; bytes copied, -1 over `room`."""
        src = os.open(f"/proc/self/fd/{vfd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600, dir_fd=ffd)
            n = 0
            try:
                while True:
                    got = os.sendfile(out, src, None, 1 << 20)
                    if not got:
                        break
                    n += got
                    if n > room:
                        break
            finally:
                os.close(out)
            if n > room:
                os.unlink(name, dir_fd=ffd)
                return -1
            return n
        finally:
            os.close(src)

    # ---------------------------------------------------------------- the end

    def finish(self, say: Callable[[str], None]) -> None:
        """At exit: the manifest closed; one line for what was not kept, one
        for deletions refused."""
        if self.thread is not None:
            self.thread.join(timeout=10)
        with self.lock:
            kept = len(self.entries)
            if self.dfd is not None:
                try:
                    self._manifest(time.time_ns())
                except OSError as e:
                    say(f"undo: cannot close the record of run {self.run_id}: {e.strerror or e}")
            for fd in (self.efd, self.ffd, self.dfd, self.wfd):
                if fd is not None:
                    os.close(fd)
            self.efd = self.ffd = self.dfd = None
        files = sum(1 for e in self.entries.values() if e["kind"] != "dir")
        if self.denied:
            say("undo: deleting files that existed at the start was not approved "
                "(approvals.deletions): refused from then on, and those deleted before were "
                f"put back (run {self.run_id})")
        # What was kept is not said: every run that rewrites a file (a commit in an
        # existing repository) would print it; the events and `confine runs` have it.
        self._emit({"action": "finished", "files": files, "not_kept": self.left_count})
        if self.left_count:
            first = printable(self.left[0]) if self.left else ""
            say(f"undo: {self.left_count} change(s) NOT kept ({keep.human(self.left_bytes)}), "
                f"the first: {first}" + (" (all: `confine runs --json`)" if kept else ""))

    def _emit(self, event: dict[str, Any]) -> None:
        if self.events is not None:
            try:
                self.events.emit({"kind": "undo", "run": self.run_id, **event})
            except Exception:  # noqa: BLE001 - saying it never stops the keeper
                pass

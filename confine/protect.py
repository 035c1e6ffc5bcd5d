"""Protected paths inside the workdir: files that run later, outside the sandbox.

An agent that writes `.git/hooks/post-checkout`, `.git/config`
(core.fsmonitor, core.pager, filter drivers, ...), `.envrc`,
`.vscode/tasks.json`, a shell rc file or `.mcp.json` in its workdir gets code
execution as the user the next time a person runs git or opens the editor
there.  Landlock cannot carve these out of a writable workdir (a grant covers
a whole tree), so confine protects them in two layers:

1. Mount namespace (confine/kernel/namespaces.py), before the agent starts:
   every protected path that exists is bind-mounted read-only onto itself
   (EROFS for writes, EBUSY for rename/unlink of the path itself), and every
   git directory plus the directories inside a pattern (`.claude` of
   `.claude/commands`) is bind-mounted read-write onto itself so it cannot be
   renamed away and replaced.  `snapshot()` computes that plan.
2. Guard, in the supervisor: `snapshot()` records every protected path that
   exists at start (content hash, a copy of small files, modes, directory
   listings, symlink targets); `verify_and_revert()` (at exit, and whenever
   the launcher wants) finds what was created, modified, renamed or deleted,
   restores the original, moves anything new into a quarantine directory
   outside the workdir (never deletes it), strips dangerous keys from the
   config of git repositories created during the run and moves their hooks
   away, and returns a report.  This covers what a mount cannot: paths that
   did not exist at start (`.envrc`, a nested repository made with
   `git init`), protected paths that are symlinks, and hosts without
   namespaces, where it is the only layer.

Patterns (the `protected:` list of a profile; `DEFAULT_PATTERNS` below):
  * workdir-relative, `/`-separated; `*`, `?`, `[...]` work inside one
    component (fnmatch, case-sensitive); `**`, `.` and `..` are refused;
  * matched at any depth (`.envrc` protects `a/b/.envrc`), unless the pattern
    starts with `/` (`/.envrc`: only the top of the workdir);
  * a trailing `/` protects the whole tree below (`.vscode/`); without it,
    only that path (`.git/config`);
  * a first component `.git` means "inside every git directory": `.git`
    directories at any depth, submodule and worktree git directories under
    `.git/modules` and `.git/worktrees`, bare repositories, and the target of
    a `.git` file (`gitdir: ...`) that lies in the workdir;
  * `!PATTERN` removes an identical earlier pattern (e.g. `!.idea/`).
Always protected, whatever the list: `.git` files (gitdir pointers), and
paths that the existing, trusted git configuration points into the workdir:
core.hooksPath (also from ~/.gitconfig, e.g. `.husky`), include.path and
includeIf.*.path, and the program of command-valued keys (core.fsmonitor,
filter drivers, ...) when it is a file in the workdir.

Walk: everything below the workdir is walked, fd by fd with O_NOFOLLOW (a
symlinked directory is never entered), except inside git directories, where
`objects`, `refs`, `logs` and `lfs` are skipped.  node_modules, virtualenvs
and build trees are walked too: a nested repository anywhere can be reached
by a person's `git status` through a gitlink, so skipping them would leave a
hole; measured: 100k directories with 300k files take about 1.7 s (2-core VM).  Nesting is followed
up to MAX_DEPTH directories; anything deeper is reported as not checked.
"""
from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import stat
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .kernel import namespaces

__all__ = [
    "DEFAULT_PATTERNS", "Pattern", "compile_patterns",
    "ConfigItem", "parse_git_config", "render_git_config", "sanitize_git_config",
    "is_dangerous_key", "is_safe_key",
    "Entry", "Root", "Snapshot", "snapshot",
    "Change", "Report", "verify_and_revert", "format_report", "default_quarantine_dir",
]

DEFAULT_PATTERNS: tuple[str, ...] = (
    # git, in every git directory of the workdir (see the module docstring)
    ".git/hooks/", ".git/config", ".git/config.worktree", ".git/commondir",
    ".gitmodules",
    # direnv, editors
    ".envrc", ".vscode/", ".idea/",
    # shell start-up files (a workdir that is someone's home, or a copy of one)
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
    ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
    # agents: MCP servers, commands, sub-agents, settings (which hold hooks), hook scripts
    ".mcp.json",
    ".claude/commands/", ".claude/agents/", ".claude/hooks/",
    ".claude/settings.json", ".claude/settings.local.json",
    ".codex/",
)

FILE_COPY_CAP = 1 << 20         # keep a copy of protected files up to 1 MiB ...
TOTAL_COPY_CAP = 64 << 20       # ... and 64 MiB in all; larger ones: hash only
HASH_CAP = 256 << 20            # above this, compare inode/size/ctime only
ENTRY_CAP = 100_000             # entries recorded below protected directories
QUARANTINE_COPY_CAP = 512 << 20  # bytes copied when a move crosses filesystems
MAX_DEPTH = 400                 # directory nesting followed by the walk
GIT_SKIP = frozenset({"objects", "refs", "logs", "lfs"})

_O_PATH = getattr(os, "O_PATH", 0o10000000)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATHDIR = _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


# ============================================================================
# patterns
# ============================================================================

@dataclass(frozen=True)
class Pattern:
    text: str                 # normalised: as written, minus "./"
    comps: tuple[str, ...]    # for git patterns: the components below the git directory
    tree: bool                # trailing "/": the whole tree
    anchored: bool            # leading "/": only at the top of the workdir
    git: bool                 # first component ".git": inside every git directory

    def wild(self, i: int) -> bool:
        return any(ch in self.comps[i] for ch in "*?[")


def _parse_pattern(raw: str) -> Pattern:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"protected path pattern {raw!r}: empty")
    text = raw.strip()
    anchored = text.startswith("/")
    tree = text.endswith("/")
    body = text.strip("/")
    while body.startswith("./"):
        body = body[2:]
    comps = tuple(c for c in body.split("/"))
    if not body or any(c in ("", ".", "..") for c in comps):
        raise ValueError(f"protected path pattern {raw!r}: empty, '.' or '..' component")
    if any("**" in c for c in comps):
        raise ValueError(f"protected path pattern {raw!r}: '**' is not supported "
                         "(patterns already match at any depth)")
    if "\0" in body:
        raise ValueError(f"protected path pattern {raw!r}: NUL byte")
    git = comps[0] == ".git"
    if git:
        if anchored:
            raise ValueError(f"protected path pattern {raw!r}: '.git/...' patterns apply to "
                             "every git directory and cannot be anchored")
        comps = comps[1:]
        if not comps:
            raise ValueError(f"protected path pattern {raw!r}: protecting whole git directories "
                             "would stop commits; name what inside them to protect")
    norm = ("/" if anchored else "") + body + ("/" if tree else "")
    return Pattern(norm, comps, tree, anchored, git)


def compile_patterns(items: Iterable[str] | None = None) -> tuple[Pattern, ...]:
    """Pattern strings -> Patterns (None: DEFAULT_PATTERNS).

    `!PATTERN` removes an identical earlier entry; raises ValueError naming the
    bad entry (unknown syntax, or a removal that matches nothing)."""
    out: list[Pattern] = []
    for raw in (DEFAULT_PATTERNS if items is None else items):
        if isinstance(raw, str) and raw.strip().startswith("!"):
            p = _parse_pattern(raw.strip()[1:])
            keep = [q for q in out if q.text != p.text]
            if len(keep) == len(out):
                raise ValueError(f"protected path pattern {raw!r}: removes nothing "
                                 f"(no earlier {p.text!r})")
            out = keep
            continue
        p = _parse_pattern(raw)
        if all(q.text != p.text for q in out):
            out.append(p)
    return tuple(out)


# ============================================================================
# git config: parse like git, regenerate, sanitize
# ============================================================================

@dataclass(frozen=True)
class ConfigItem:
    section: str              # lower case
    sub: str | None           # case kept ([a "b"]); legacy [a.b] is lowered by git
    key: str                  # lower case
    value: str | None         # None: the key alone (boolean true)
    line: int

    @property
    def name(self) -> str:
        return ".".join(x for x in (self.section, self.sub, self.key) if x is not None)


class _Src:
    def __init__(self, data: bytes):
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        self.s = data.decode("utf-8", "surrogateescape")
        self.i = 0
        self.line = 1
        self.eof = False

    def get(self) -> str:
        if self.i >= len(self.s):
            self.eof = True
            return "\n"
        c = self.s[self.i]
        self.i += 1
        if c == "\r" and self.i < len(self.s) and self.s[self.i] == "\n":
            c = "\n"
            self.i += 1
        if c == "\n":
            self.line += 1
        return c

    def unget(self, c: str) -> None:
        if not self.eof:
            self.i -= 2 if (c == "\n" and self.s[self.i - 1] == "\n" and self.i >= 2
                             and self.s[self.i - 2] == "\r") else 1
            if c == "\n":
                self.line -= 1


def _iskey(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "-")


def _parse_value(src: _Src) -> str | None:
    out: list[str] = []
    quote = comment = False
    space = 0
    while True:
        c = src.get()
        if c == "\n":
            if quote:
                return None
            return "".join(out)
        if comment:
            continue
        if c in " \t\v\f\r" and not quote:
            if out:
                space += 1
            continue
        if not quote and c in ";#":
            comment = True
            continue
        out.extend(" " * space)
        space = 0
        if c == "\\":
            c = src.get()
            if c == "\n":
                if src.eof:
                    return None
                continue
            c = {"t": "\t", "b": "\b", "n": "\n", "\\": "\\", '"': '"'}.get(c)
            if c is None:
                return None
            out.append(c)
            continue
        if c == '"':
            quote = not quote
            continue
        out.append(c)


def parse_git_config(data: bytes) -> tuple[list[ConfigItem], str | None]:
    """The entries git would read from this file, in order, and an error.

    Follows git's config.c: comments (# ;), [section], [section "sub"],
    legacy [section.sub], keys on the same line as the header, quoting,
    escapes (\\n \\t \\b \\\\ \\"), line continuation, CRLF, a UTF-8 BOM.
    On a syntax error git refuses the whole file; this returns the entries
    before it plus "line N: why"."""
    src = _Src(data)
    items: list[ConfigItem] = []
    section: str | None = None
    sub: str | None = None
    comment = False
    while True:
        c = src.get()
        if c == "\n":
            if src.eof:
                return items, None
            comment = False
            continue
        if comment or c in " \t\v\f\r":
            continue
        if c in "#;":
            comment = True
            continue
        if c == "[":
            name: list[str] = []
            sub = None
            while True:
                c = src.get()
                if src.eof:
                    return items, f"line {src.line}: unterminated section header"
                if c == "]":
                    break
                if c in " \t":
                    while c in " \t":
                        c = src.get()
                    if c != '"':
                        return items, f"line {src.line}: bad section header"
                    chars: list[str] = []
                    while True:
                        c = src.get()
                        if c == "\n":
                            return items, f"line {src.line}: newline in subsection"
                        if c == '"':
                            break
                        if c == "\\":
                            c = src.get()
                            if c == "\n":
                                return items, f"line {src.line}: newline in subsection"
                        chars.append(c)
                    if src.get() != "]":
                        return items, f"line {src.line}: bad section header"
                    sub = "".join(chars)
                    break
                if not (_iskey(c) or c == "."):
                    return items, f"line {src.line}: bad character in section name"
                name.append(c.lower())
            full = "".join(name)
            if not full:
                return items, f"line {src.line}: empty section name"
            if sub is None and "." in full:       # legacy [section.sub]: all lower case
                section, sub = full.split(".", 1)
            else:
                section = full
            continue
        if not (c.isascii() and c.isalpha()):
            return items, f"line {src.line}: bad config line"
        if section is None:
            return items, f"line {src.line}: key outside a section"
        line = src.line
        key = [c.lower()]
        while True:
            c = src.get()
            if src.eof or not _iskey(c):
                break
            key.append(c.lower())
        while c in " \t":
            c = src.get()
        value: str | None
        if c == "\n":
            value = None
            src.unget(c)
        elif c != "=":
            return items, f"line {src.line}: expected '=' after {''.join(key)!r}"
        else:
            value = _parse_value(src)
            if value is None:
                return items, f"line {src.line}: bad value for {''.join(key)!r}"
            src.unget("\n")
        items.append(ConfigItem(section, sub, "".join(key), value, line))


def _quote(v: str) -> str:
    if v and not (set(v) & set('"\\#;\n\t\b\r')) and v == v.strip():
        return v
    return '"' + (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
                  .replace("\t", "\\t").replace("\b", "\\b")) + '"'


def render_git_config(items: Sequence[ConfigItem]) -> bytes:
    """A canonical config file holding exactly `items` (subsections quoted)."""
    out: list[str] = []
    cur = None
    for it in items:
        head = (it.section, it.sub)
        if head != cur:
            if it.sub is None:
                out.append(f"[{it.section}]")
            else:
                out.append(f'[{it.section} "' + it.sub.replace("\\", "\\\\").replace('"', '\\"') + '"]')
            cur = head
        out.append(f"\t{it.key}" if it.value is None else f"\t{it.key} = {_quote(it.value)}")
    return ("\n".join(out) + "\n").encode("utf-8", "surrogateescape") if out else b""


# Keys a repository created during the run may keep: plain data, nothing that
# names a program, a path git would load, or a URL rewrite.
_SAFE_PLAIN = {
    "core": {"repositoryformatversion", "filemode", "bare", "logallrefupdates", "ignorecase",
             "precomposeunicode", "symlinks", "autocrlf", "eol", "safecrlf", "quotepath",
             "sparsecheckout", "sparsecheckoutcone", "compression", "loosecompression",
             "bigfilethreshold", "abbrev", "untrackedcache", "checkstat", "trustctime",
             "splitindex", "preloadindex", "commentchar", "whitespace", "fsyncmethod"},
    "user": {"name", "email", "useconfigonly"},
    "init": {"defaultbranch"},
    "pull": {"rebase", "ff"},
    "push": {"default", "autosetupremote", "followtags"},
    "fetch": {"prune", "prunetags", "recursesubmodules", "writecommitgraph"},
    "submodule": {"active", "recurse", "fetchjobs"},
    "lfs": {"repositoryformatversion"},
    "index": {"version"},
    "feature": {"manyfiles"},
}
_SAFE_ANY_KEY = {"extensions", "color", "advice"}      # every key, no subsection needed
_SAFE_SUB = {
    "remote": {"url", "pushurl", "fetch", "push", "tagopt", "prune", "prunetags", "mirror",
               "promisor", "partialclonefilter", "skipdefaultupdate", "skipfetchall"},
    "branch": {"remote", "merge", "rebase", "pushremote", "description"},
    "submodule": {"url", "active", "branch", "fetchrecursesubmodules", "ignore", "shallow"},
}

# Keys that make git (or a tool reading the repository's config) run a
# program, load another file, or change where git works.  Only used to label
# what was removed; the sanitizer keeps nothing outside the safe list.
_DANGEROUS = (
    "core.fsmonitor", "core.pager", "core.sshcommand", "core.hookspath", "core.editor",
    "core.askpass", "core.gitproxy", "core.worktree", "core.alternaterefscommand",
    "core.attributesfile", "diff.external", "diff.*.command", "diff.*.textconv",
    "filter.*", "merge.*.driver", "credential.helper", "credential.*.helper",
    "include.path", "includeif.*.path", "uploadpack.packobjectshook",
    "remote.*.uploadpack", "remote.*.receivepack", "remote.*.vcs", "remote.*.proxy",
    "sequence.editor", "gpg.program", "gpg.*.program", "gpg.ssh.defaultkeycommand",
    "pager.*", "web.browser", "browser.*.cmd", "browser.*.path", "man.*.cmd", "man.*.path",
    "difftool.*.cmd", "difftool.*.path", "mergetool.*.cmd", "mergetool.*.path",
    "interactive.difffilter", "ssh.variant", "protocol.allow", "protocol.*.allow",
    "url.*.insteadof", "url.*.pushinsteadof", "submodule.*.update", "trailer.*.command",
    "trailer.*.cmd", "hook.*.command", "hook.*.event", "guitool.*.cmd", "sendemail.*",
    "lfs.customtransfer.*.path", "lfs.extension.*.clean", "lfs.extension.*.smudge",
    "receive.procreceiverefs", "safe.directory", "http.*.proxy", "http.proxy",
    "core.sshcommand", "instaweb.*", "tig.*", "difftool.*", "mergetool.*",
)


def is_safe_key(it: ConfigItem) -> bool:
    if it.section in _SAFE_ANY_KEY:
        return True
    if it.sub is None:
        return it.key in _SAFE_PLAIN.get(it.section, ())
    if it.key not in _SAFE_SUB.get(it.section, ()):
        return False
    if it.section == "remote" and it.key in ("url", "pushurl") and it.value \
            and it.value.lower().startswith("ext::"):
        return False
    return True


def is_dangerous_key(it: ConfigItem) -> bool:
    name = it.name.lower()
    if it.section == "alias":
        return bool(it.value and it.value.lstrip().startswith("!"))
    return any(fnmatch.fnmatchcase(name, pat) for pat in _DANGEROUS)


def sanitize_git_config(data: bytes) -> tuple[bytes, list[ConfigItem], str | None]:
    """(new file, removed entries, parse error) keeping only `is_safe_key` entries.
    Anything after a syntax error is dropped with the error reported."""
    items, err = parse_git_config(data)
    keep = [it for it in items if is_safe_key(it)]
    removed = [it for it in items if not is_safe_key(it)]
    return render_git_config(keep), removed, err


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", ""}
_COMMAND_KEYS = ("core.fsmonitor", "core.pager", "core.editor", "core.sshcommand",
                 "core.askpass", "core.gitproxy", "core.alternaterefscommand", "diff.external",
                 "diff.*.command", "diff.*.textconv", "filter.*.clean", "filter.*.smudge",
                 "filter.*.process", "merge.*.driver", "credential.helper",
                 "credential.*.helper", "sequence.editor", "gpg.program", "gpg.*.program",
                 "gpg.ssh.defaultkeycommand", "pager.*", "interactive.difffilter")


# ============================================================================
# snapshot data
# ============================================================================

@dataclass
class Entry:
    rel: str
    kind: str                      # "f" file, "d" directory, "l" symlink, "o" other
    mode: int                      # S_IMODE
    uid: int
    gid: int
    dev: int
    ino: int
    size: int = 0
    ctime_ns: int = 0
    nlink: int = 1
    sha256: str | None = None      # files: None if unreadable or above HASH_CAP
    data: bytes | None = None      # files: a copy when small enough
    target: str | None = None      # symlinks
    root: str = ""                 # the protected root this entry belongs to


@dataclass
class Root:
    rel: str
    tree: bool                     # the whole tree below is protected
    why: str                       # the pattern, or what referenced it
    gitdir: str | None = None      # set for roots inside a git directory
    mounted: bool = False          # covered by a read-only bind of the mount plan
    trusted: bool = False          # mounted and not reachable through a hard link


@dataclass
class GitDir:
    rel: str
    dev: int
    ino: int
    worktree: str | None = None    # workdir-relative, None for bare / unknown


@dataclass
class Snapshot:
    workdir: str
    patterns: tuple[Pattern, ...]
    run_id: str
    roots: dict[str, Root]
    entries: dict[str, Entry]
    gitdirs: dict[str, GitDir]
    pins: tuple[str, ...]
    extra: tuple[tuple[str, bool, str], ...]   # (rel, tree, why) from trusted git configs
    global_hooks: tuple[str, ...]              # relative core.hooksPath from global configs
    mount_plan: namespaces.Plan
    guard_only: tuple[tuple[str, str], ...]    # (rel, reason): existing, not covered by a mount
    notes: tuple[str, ...]                     # what could not be recorded
    taken_at: float = 0.0
    seconds: float = 0.0

    def describe(self) -> dict:
        """JSON-able view for --dry-run: what is protected and how."""
        ro = {"/".join(m.rel) for m in self.mount_plan.mounts if m.readonly}
        return {
            "workdir": self.workdir,
            "patterns": [p.text for p in self.patterns],
            "git_directories": sorted(self.gitdirs),
            "protected": [{"path": r.rel, "tree": r.tree, "why": r.why,
                           "read_only_bind": r.mounted, "trusted": r.trusted}
                          for r in sorted(self.roots.values(), key=lambda r: r.rel)],
            "read_only_binds": sorted(ro),
            "pinned": sorted("/".join(m.rel) for m in self.mount_plan.mounts if not m.readonly),
            "bases": [b.path for b in self.mount_plan.bases],
            "bases_complete": self.mount_plan.complete,
            "guard_only": [{"path": p, "reason": why} for p, why in self.guard_only],
            "notes": list(self.notes),
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        return (f"{len(self.roots)} protected paths in {len(self.gitdirs)} git directories, "
                f"{len(self.mount_plan.mounts)} binds x {len(self.mount_plan.bases)} "
                f"path(s) to the workdir, snapshot {self.seconds:.2f}s")


# ============================================================================
# fd-based access below the workdir
# ============================================================================

class _Unsafe(Exception):
    """A component on the way is a symlink or not a directory."""


def _join(a: str, b: str) -> str:
    return f"{a}/{b}" if a else b


def _parent_of(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _under(rel: str, top: str) -> bool:
    return top == "" or rel == top or rel.startswith(top + "/")


class _Fs:
    def __init__(self, workdir: str):
        self.path = workdir
        self.fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self.fd)

    def parent(self, rel: str, create: bool = False) -> tuple[int, str]:
        """(fd of the parent directory, last name); the caller closes the fd.
        FileNotFoundError if a parent is missing (unless create), _Unsafe if a
        component is a symlink or not a directory."""
        comps = rel.split("/")
        cur = os.dup(self.fd)
        try:
            for c in comps[:-1]:
                # O_PATH: search permission is enough, as for any path lookup
                try:
                    nxt = os.open(c, _PATHDIR, dir_fd=cur)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(c, 0o755, dir_fd=cur)
                    nxt = os.open(c, _PATHDIR, dir_fd=cur)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _Unsafe(rel) from None
                    raise
                os.close(cur)
                cur = nxt
            return cur, comps[-1]
        except BaseException:
            os.close(cur)
            raise

    def lstat(self, rel: str):
        if rel == "":
            return os.fstat(self.fd)
        try:
            pfd, name = self.parent(rel)
        except (OSError, _Unsafe):
            return None
        try:
            return os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(pfd)

    def read_file(self, pfd: int, name: str, st, cap: int) -> bytes | None:
        """Content of a regular file (None: unreadable, changed or larger than cap)."""
        if st.st_size > cap:
            return None
        try:
            fd = os.open(name, _FILE, dir_fd=pfd)
        except OSError:
            return None
        try:
            st2 = os.fstat(fd)
            if not stat.S_ISREG(st2.st_mode) or st2.st_ino != st.st_ino:
                return None
            chunks, total = [], 0
            while total <= cap:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
                total += len(b)
            return b"".join(chunks) if total <= cap else None
        finally:
            os.close(fd)


    def hash_file(self, pfd: int, name: str, st, keep: bool) -> tuple[str | None, bytes | None]:
        """(sha256, content if keep) of a regular file, read in chunks; (None,
        None) if unreadable, replaced meanwhile, or larger than HASH_CAP."""
        if st.st_size > HASH_CAP:
            return None, None
        try:
            fd = os.open(name, _FILE, dir_fd=pfd)
        except OSError:
            return None, None
        try:
            st2 = os.fstat(fd)
            if not stat.S_ISREG(st2.st_mode) or st2.st_ino != st.st_ino:
                return None, None
            h, chunks, total = hashlib.sha256(), [], 0
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                total += len(b)
                if total > HASH_CAP:
                    return None, None
                h.update(b)
                if keep:
                    chunks.append(b)
            return h.hexdigest(), (b"".join(chunks) if keep and total <= FILE_COPY_CAP else None)
        finally:
            os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "f"
    if stat.S_ISDIR(mode):
        return "d"
    if stat.S_ISLNK(mode):
        return "l"
    return "o"


# ============================================================================
# scanning: discovery + recording (used for the snapshot and for verification)
# ============================================================================

class _Scan:
    def __init__(self, workdir: str, pats: Sequence[Pattern], *, copy: bool,
                 prev: Snapshot | None = None, extra=(), global_hooks=(),
                 parse_configs: bool = True, home: str | None = None,
                 git_configs: Sequence[str] | None = None):
        self.workdir = workdir
        self.fs = _Fs(workdir)
        self.pats = [p for p in pats if not p.git]
        self.git_pats = [p for p in pats if p.git]
        self.first: dict[str, list[Pattern]] = {}
        self.wild_first: list[Pattern] = []
        for p in self.pats:
            if p.wild(0):
                self.wild_first.append(p)
            else:
                self.first.setdefault(p.comps[0], []).append(p)
        self.copy = copy
        self.prev = prev
        self.budget = TOTAL_COPY_CAP
        self.roots: dict[str, Root] = {}
        self.entries: dict[str, Entry] = {}
        self.gitdirs: dict[str, GitDir] = {}
        self.pins: dict[str, tuple[int, int]] = {}  # rel -> (dev, ino) of directories to pin
        self.notes: list[str] = []
        self.pointers: dict[str, str | None] = {}   # .git file -> target gitdir rel (None: outside/unsafe)
        self.pointer_targets: set[str] = set()
        self._worktree_of: dict[str, str] = {}
        self.extra: list[tuple[str, bool, str]] = list(extra)
        self.global_hooks: list[str] = list(global_hooks)
        self.parse_configs = parse_configs
        self.home = home
        self.git_configs = git_configs
        self.n_entries = 0

    # --- roots --------------------------------------------------------------
    def record(self, rel: str, tree: bool, why: str, gitdir: str | None = None,
               depth: int = 0) -> None:
        if not rel or rel.startswith("../") or rel == "..":
            return
        for r in self._covering(rel):
            if r.tree and r.rel != rel:
                return  # already inside a protected tree
        old = self.roots.get(rel)
        if old is not None:
            if tree and not old.tree:
                old.tree = True
                self._record_entries(rel, True, depth)
            return
        st = self.fs.lstat(rel)
        if st is None:
            return
        self.roots[rel] = Root(rel, tree, why, gitdir)
        self._record_entries(rel, tree, depth)

    def _covering(self, rel: str):
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            r = self.roots.get("/".join(parts[:i]))
            if r is not None:
                yield r

    def _normalize(self) -> None:
        """A tree recorded after a root below it swallows that root (its
        entries were recorded again, owned by the tree)."""
        for rel in list(self.roots):
            parts = rel.split("/")
            for i in range(1, len(parts)):
                r = self.roots.get("/".join(parts[:i]))
                if r is not None and r.tree:
                    del self.roots[rel]
                    break

    def _record_entries(self, rel: str, tree: bool, depth: int) -> None:
        try:
            pfd, name = self.fs.parent(rel)
        except (OSError, _Unsafe):
            return
        try:
            self._entry(pfd, name, rel, rel, tree, depth, 0)
        finally:
            os.close(pfd)

    def _entry(self, pfd: int, name: str, rel: str, root: str, tree: bool,
               depth: int, level: int) -> None:
        try:
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except OSError:
            return
        self.n_entries += 1
        if self.n_entries > ENTRY_CAP:
            if self.n_entries == ENTRY_CAP + 1:
                self.notes.append(f"more than {ENTRY_CAP} entries in protected directories; "
                                  f"{rel} and later ones not recorded")
            return
        k = _kind(st.st_mode)
        e = Entry(rel, k, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_dev, st.st_ino,
                  st.st_size, st.st_ctime_ns, st.st_nlink, root=root)
        self.entries[rel] = e
        if k == "f":
            p = self.prev.entries.get(rel) if self.prev else None
            if (p is not None and p.kind == "f" and (p.dev, p.ino, p.size, p.ctime_ns)
                    == (st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns)):
                e.sha256 = p.sha256  # the kernel sets ctime on every change: unchanged
                return
            keep = self.copy and st.st_size <= min(FILE_COPY_CAP, self.budget)
            e.sha256, data = self.fs.hash_file(pfd, name, st, keep)
            if data is not None:
                e.data = data
                self.budget -= len(data)
            if self.copy and e.sha256 is None:
                self.notes.append(f"{rel}: unreadable or larger than {HASH_CAP} bytes: "
                                  "changes detected from inode, size and ctime only")
            elif self.copy and data is None:
                self.notes.append(f"{rel}: {st.st_size} bytes, no copy kept (cannot be restored)")
        elif k == "l":
            try:
                e.target = os.readlink(name, dir_fd=pfd)
            except OSError:
                e.target = None
            self._link_target(rel, depth)
        elif k == "d" and tree:
            if level > 64:
                self.notes.append(f"{rel}: nested deeper than 64 levels, not recorded below")
                return
            try:
                fd = os.open(name, _DIR, dir_fd=pfd)
            except OSError as ex:
                self.notes.append(f"{rel}: cannot list ({os.strerror(ex.errno)})")
                return
            try:
                for de in sorted(os.scandir(fd), key=lambda d: d.name):
                    self._entry(fd, de.name, _join(rel, de.name), root, tree, depth, level + 1)
            finally:
                os.close(fd)

    def _link_target(self, rel: str, depth: int) -> None:
        """A protected symlink whose target is in the workdir: protect the target."""
        if depth >= 8:
            return
        real = os.path.realpath(os.path.join(self.workdir, rel))
        if real == self.workdir or not real.startswith(self.workdir.rstrip("/") + "/"):
            return
        trel = os.path.relpath(real, self.workdir)
        st = self.fs.lstat(trel)
        if st is None:
            return
        self.record(trel, stat.S_ISDIR(st.st_mode), f"target of symlink {rel}", depth=depth + 1)

    # --- walking ------------------------------------------------------------
    def walk(self) -> None:
        st0 = os.fstat(self.fs.fd)
        visited = {(st0.st_dev, st0.st_ino)}
        stack: list[list] = [["", os.dup(self.fs.fd), None]]
        try:
            while stack:
                top = stack[-1]
                rel, fd, pending = top
                if pending is None:
                    pending = top[2] = self._visit(rel, fd)
                if not pending:
                    os.close(fd)
                    stack.pop()
                    continue
                name = pending.pop()
                child = _join(rel, name)
                try:
                    cfd = os.open(name, _DIR | os.O_NONBLOCK, dir_fd=fd)
                except OSError as e:
                    if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                        self.notes.append(f"{child}: not checked ({os.strerror(e.errno)})")
                    continue
                cst = os.fstat(cfd)
                if (cst.st_dev, cst.st_ino) in visited:
                    os.close(cfd)
                    continue
                visited.add((cst.st_dev, cst.st_ino))
                if len(stack) >= MAX_DEPTH:
                    os.close(cfd)
                    self.notes.append(f"{child}: nested deeper than {MAX_DEPTH} directories, "
                                      "not checked")
                    continue
                stack.append([child, cfd, None])
        finally:
            for item in stack:
                os.close(item[1])
        # .git files pointing into the workdir somewhere the walk did not reach
        for ptr, target in list(self.pointers.items()):
            if target is not None and target not in self.gitdirs:
                self._visit_gitdir_at(target)
        self._worktrees()
        if self.parse_configs:
            self._config_references()
        for rel, tree, why in self.extra:
            self.record(rel, tree, why)
        for hp in self.global_hooks:
            for g in list(self.gitdirs.values()):
                if g.worktree is not None:
                    t = os.path.normpath(_join(g.worktree, hp))
                    if t != ".." and not t.startswith("../") and t != ".":
                        self.record(t, True, "core.hooksPath in the global git config")
        self._normalize()

    def _visit_gitdir_at(self, rel: str) -> None:
        try:
            pfd, name = self.fs.parent(rel)
        except (OSError, _Unsafe):
            return
        try:
            fd = os.open(name, _DIR, dir_fd=pfd)
        except OSError:
            os.close(pfd)
            return
        try:
            self._add_gitdir(rel, fd)
        finally:
            os.close(fd)
            os.close(pfd)

    def _visit(self, rel: str, fd: int) -> list[str]:
        try:
            ents = list(os.scandir(fd))
        except OSError as e:
            self.notes.append(f"{rel or '.'}: cannot list ({os.strerror(e.errno)}), not checked")
            return []
        names = {e.name for e in ents}
        in_git = False
        if ("HEAD" in names and (("objects" in names and "refs" in names) or "commondir" in names)) \
                or rel.endswith("/.git") or rel == ".git" or rel in self.pointer_targets:
            in_git = True
            self._add_gitdir(rel, fd)
        subdirs = []
        for e in ents:
            name = e.name
            child = _join(rel, name)
            try:
                isdir = e.is_dir(follow_symlinks=False)
            except OSError:
                isdir = False
            if name == ".git" and not isdir:
                self._pointer(child, rel)
            for p in self.first.get(name, ()):
                if not (p.anchored and rel):
                    self._match(rel, p)
            for p in self.wild_first:
                if not (p.anchored and rel) and fnmatch.fnmatchcase(name, p.comps[0]):
                    self._match(rel, p, name)
            if not isdir or (in_git and name in GIT_SKIP):
                continue
            r = self.roots.get(child)
            if r is not None and r.tree:
                continue
            subdirs.append(name)
        subdirs.sort(reverse=True)
        return subdirs

    def _expand(self, base: str, comps: Sequence[str], first: str | None = None) -> list[str]:
        """Existing paths matching comps below base; intermediate components
        must be real directories (lstat), never symlinks."""
        cur = [base]
        for i, c in enumerate(comps):
            nxt = []
            for b in cur:
                if i == 0 and first is not None:
                    names = [first]
                elif any(ch in c for ch in "*?["):
                    try:
                        pfd, nm = (self.fs.parent(b) if b else (os.dup(self.fs.fd), None))
                    except (OSError, _Unsafe):
                        continue
                    try:
                        if nm is None:
                            listing = os.listdir(pfd)
                        else:
                            dfd = os.open(nm, _DIR, dir_fd=pfd)
                            try:
                                listing = os.listdir(dfd)
                            finally:
                                os.close(dfd)
                    except OSError:
                        listing = []
                    finally:
                        os.close(pfd)
                    names = [n for n in listing if fnmatch.fnmatchcase(n, c)]
                else:
                    names = [c]
                for n in names:
                    cand = _join(b, n)
                    st = self.fs.lstat(cand)
                    if st is None:
                        continue
                    if i < len(comps) - 1 and not stat.S_ISDIR(st.st_mode):
                        continue
                    nxt.append(cand)
            cur = nxt
        return cur

    def _match(self, rel: str, p: Pattern, first: str | None = None) -> None:
        for m in self._expand(rel, p.comps, first):
            self.record(m, p.tree, p.text)
            self._pin_between(rel, m)

    def _pin_between(self, base: str, rel: str) -> None:
        """Directories inside a pattern match (".claude" of ".claude/commands")."""
        parts = rel.split("/")
        nbase = len(base.split("/")) if base else 0
        for i in range(nbase + 1, len(parts)):
            d = "/".join(parts[:i])
            if d not in self.pins:
                st = self.fs.lstat(d)
                if st is not None and stat.S_ISDIR(st.st_mode):
                    self.pins[d] = (st.st_dev, st.st_ino)

    def _add_gitdir(self, rel: str, fd: int) -> None:
        if rel in self.gitdirs:
            return
        st = os.fstat(fd)
        self.gitdirs[rel] = GitDir(rel, st.st_dev, st.st_ino)
        if rel:
            self.pins[rel] = (st.st_dev, st.st_ino)
        for p in self.git_pats:
            for m in self._expand(rel, p.comps):
                self.record(m, p.tree, p.text, gitdir=rel)
                self._pin_between(rel, m)

    def _pointer(self, rel: str, wt: str) -> None:
        """A `.git` file (or symlink): always protected; follow it when it
        points to a git directory inside the workdir."""
        self.record(rel, False, "gitdir pointer (.git file)")
        target = None
        st = self.fs.lstat(rel)
        if st is not None and stat.S_ISREG(st.st_mode):
            try:
                pfd, name = self.fs.parent(rel)
                try:
                    data = self.fs.read_file(pfd, name, st, 4096)
                finally:
                    os.close(pfd)
            except (OSError, _Unsafe):
                data = None
            if data and data.startswith(b"gitdir:"):
                t = data[7:].strip().split(b"\n")[0].decode("utf-8", "surrogateescape")
                target = self._inside(t, wt)
        elif st is not None and stat.S_ISLNK(st.st_mode):
            real = os.path.realpath(os.path.join(self.workdir, rel))
            target = self._inside(real, "")
        if target is not None:
            tst = self.fs.lstat(target)
            if tst is None or not stat.S_ISDIR(tst.st_mode):
                target = None
        self.pointers[rel] = target
        if target is not None:
            self.pointer_targets.add(target)
            self._worktree_of.setdefault(target, wt)

    def _inside(self, path: str, base: str) -> str | None:
        """Workdir-relative form of path (relative to base) if it stays inside."""
        full = path if os.path.isabs(path) else os.path.join(self.workdir, base, path)
        full = os.path.normpath(full)
        w = self.workdir.rstrip("/")
        if full == w:
            return ""
        if not full.startswith(w + "/"):
            return None
        return full[len(w) + 1:]

    def _worktrees(self) -> None:
        for rel, g in self.gitdirs.items():
            if rel == ".git" or rel.endswith("/.git"):
                g.worktree = _parent_of(rel)
            elif rel in self._worktree_of:
                g.worktree = self._worktree_of[rel]

    # --- references from trusted git configuration --------------------------
    def _read_rel(self, rel: str, cap: int = 1 << 20) -> bytes | None:
        st = self.fs.lstat(rel)
        if st is None or not stat.S_ISREG(st.st_mode):
            return None
        try:
            pfd, name = self.fs.parent(rel)
        except (OSError, _Unsafe):
            return None
        try:
            return self.fs.read_file(pfd, name, st, cap)
        finally:
            os.close(pfd)

    def _config_references(self) -> None:
        found: list[tuple[str, bool, str]] = []
        for rel, g in list(self.gitdirs.items()):
            for cfg in ("config", "config.worktree"):
                crel = _join(rel, cfg)
                data = self._read_rel(crel)
                if data is None:
                    continue
                items, _ = parse_git_config(data)
                for it in items:  # core.worktree first: relative paths below depend on it
                    if it.name == "core.worktree" and it.value and g.worktree is None:
                        g.worktree = self._inside(it.value, rel)
                for it in items:
                    name = it.name.lower()
                    v = it.value
                    if v is None:
                        continue
                    if name == "include.path" or (it.section == "includeif" and it.key == "path"):
                        t = self._inside(v, rel) if not v.startswith("~") else None
                        if t:
                            found.append((t, False, f"include.path in {crel}"))
                    elif name == "core.hookspath":
                        base = g.worktree if g.worktree is not None else rel
                        t = self._inside(v, base) if not v.startswith("~") else None
                        if t:
                            found.append((t, True, f"core.hooksPath in {crel}"))
                    elif any(fnmatch.fnmatchcase(name, k) for k in _COMMAND_KEYS) or \
                            (it.section == "alias" and v.lstrip().startswith("!")):
                        cmd = v.lstrip().lstrip("!").strip()
                        if name == "core.fsmonitor" and cmd.lower() in _BOOL_WORDS:
                            continue
                        tok = cmd.split()[0] if cmd.split() else ""
                        if "/" in tok and not tok.startswith("~"):
                            base = g.worktree if g.worktree is not None else rel
                            t = self._inside(tok, base)
                            if t:
                                found.append((t, False, f"{it.name} in {crel}"))
        # global and system configuration: a relative core.hooksPath applies to every worktree
        for path in self._global_config_files():
            try:
                with open(path, "rb") as f:
                    data = f.read(1 << 20)
            except OSError:
                continue
            items, _ = parse_git_config(data)
            for it in items:
                if it.name.lower() == "core.hookspath" and it.value:
                    v = it.value
                    if v.startswith("~") or os.path.isabs(v):
                        full = os.path.expanduser(v) if v.startswith("~") and self.home is None \
                            else (self.home + v[1:] if v.startswith("~") else v)
                        t = self._inside(full, "")
                        if t:
                            found.append((t, True, f"core.hooksPath in {path}"))
                    elif v not in self.global_hooks:
                        self.global_hooks.append(v)
        for t in found:
            if t not in self.extra:
                self.extra.append(t)

    def _global_config_files(self) -> list[str]:
        if self.git_configs is not None:
            return list(self.git_configs)
        out = ["/etc/gitconfig"]
        if self.home:
            out.append(os.path.join(self.home, ".gitconfig"))
            out.append(os.path.join(self.home, ".config", "git", "config"))
        return out


# ============================================================================
# snapshot
# ============================================================================

def _run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"


def snapshot(workdir: str, patterns: Iterable[str] | Sequence[Pattern] | None = None, *,
             home: str | None = None, git_configs: Sequence[str] | None = None,
             run_id: str | None = None) -> Snapshot:
    """Record every protected path of `workdir` and plan the mount namespace.

    Runs in the supervisor before the fork (single-threaded).  `patterns`:
    pattern strings (None: DEFAULT_PATTERNS) or compiled Patterns.  `home`:
    the home directory of the person who will use the workdir afterwards
    (its ~/.gitconfig may set a relative core.hooksPath); `git_configs`
    replaces the list of global config files read (/etc/gitconfig,
    ~/.gitconfig, ~/.config/git/config).  Raises OSError if the workdir
    cannot be opened, ValueError for a bad pattern.
    """
    t0 = time.monotonic()
    workdir = os.path.realpath(workdir)
    if patterns is None:
        pats = compile_patterns(None)
    else:
        plist = list(patterns)
        pats = tuple(plist) if plist and all(isinstance(p, Pattern) for p in plist) \
            else compile_patterns(plist)
    sc = _Scan(workdir, pats, copy=True, home=home, git_configs=git_configs)
    try:
        sc.walk()
    finally:
        sc.fs.close()
    plan, guard_only = _mount_plan(workdir, sc)
    return Snapshot(workdir, pats, run_id or _run_id(), sc.roots, sc.entries, sc.gitdirs,
                    tuple(sorted(sc.pins)), tuple(sc.extra), tuple(sc.global_hooks), plan,
                    tuple(guard_only), tuple(sc.notes), time.time(), time.monotonic() - t0)


def _mount_plan(workdir: str, sc: _Scan) -> tuple[namespaces.Plan, list[tuple[str, str]]]:
    ro: dict[str, Entry] = {}
    guard_only: list[tuple[str, str]] = []
    for rel, r in sc.roots.items():
        e = sc.entries.get(rel)
        if e is None:
            continue
        if e.kind == "l":
            guard_only.append((rel, "is a symlink (a mount cannot cover the link itself)"))
            continue
        if e.kind == "o":
            guard_only.append((rel, "is not a file, directory or symlink"))
            continue
        ro[rel] = e
    ro_dirs = [k for k, e in ro.items() if e.kind == "d"]

    def covered(rel: str) -> bool:
        return any(rel != d and _under(rel, d) for d in ro_dirs)

    mounts = []
    for rel in sorted(set(sc.pins) | set(ro), key=lambda k: (k.count("/"), k)):
        if not rel or covered(rel):
            continue
        comps = tuple(rel.split("/"))
        if rel in ro:
            e = ro[rel]
            mounts.append(namespaces.Mount(comps, True, e.dev, e.ino, e.kind == "d"))
        else:
            dev, ino = sc.pins[rel]
            mounts.append(namespaces.Mount(comps, False, dev, ino, True))
    planned = {"/".join(m.rel) for m in mounts if m.readonly}
    hard: dict[str, str] = {}
    for e in sc.entries.values():
        if e.kind == "f" and e.nlink > 1:
            hard.setdefault(e.root, e.rel)
    for rel, r in sc.roots.items():
        if rel in planned or (rel in ro and covered(rel)):
            r.mounted = True
            r.trusted = rel not in hard
            if rel in hard:
                guard_only.append((rel, f"hard-linked elsewhere ({hard[rel]}): writable through "
                                        "the other link"))
    paths, complete = namespaces.reachable_paths(workdir)
    bases = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        bases.append(namespaces.Base(p, st.st_dev, st.st_ino))
    return namespaces.Plan(tuple(bases), tuple(mounts), complete), guard_only


# ============================================================================
# verification and revert
# ============================================================================

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

    def keep_current(self, rel: str, now: Entry) -> str:
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
        for other in [o for o in moved if o != rel and _under(o, rel)]:
            if rel in moved and moved[other] == moved[rel] + other[len(rel):]:
                del moved[other]
    back = {old: new for new, old in moved.items()}

    def to_snap(rel: str) -> str:
        for new in sorted(moved, key=len, reverse=True):
            if _under(rel, new):
                return moved[new] + rel[len(new):]
        return rel

    def to_cur(srel: str) -> str:
        for old in sorted(back, key=len, reverse=True):
            if _under(srel, old):
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
        return any(_under(rel, h) for h in handled)

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
                qpath = rv.keep_current(rel, now)
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


def _roots_covering(roots: dict[str, Root], rel: str):
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


# ============================================================================
# report
# ============================================================================

_VERB = {
    "created": "created", "modified": "modified", "deleted": "deleted", "mode": "chmod",
    "type": "replaced", "new-repo": "new repo", "moved": "moved", "unchecked": "unchecked",
    "external": "outside",
}


def format_report(report: Report, *, verbose: bool = False) -> str:
    """Loud, line-per-change text for stderr (alerts only unless verbose)."""
    shown = report.changes if verbose else report.alerts
    if not shown:
        return ""
    lines = []
    if report.alerts:
        lines.append("confine: PROTECTED PATHS WERE CHANGED IN THE WORKDIR during this run "
                     "(files that would run later, outside the sandbox)")
        if not report.namespaces_active:
            lines.append("confine: no mount namespace was active: this check after the run "
                         "was the only protection")
    width = min(max(len(c.path) for c in shown), 48)
    for c in shown:
        tail = c.detail
        if c.quarantine:
            tail = (tail + "; " if tail else "") + f"moved to {c.quarantine}"
        lines.append(f"  {_VERB.get(c.what, c.what):9} {c.path:<{width}}  {c.action}"
                     + (f": {tail}" if tail else ""))
    if report.failed:
        lines.append(f"confine: {len(report.failed)} could NOT be reverted: inspect them before "
                     "running git or opening the editor here")
    if report.quarantine_dir and any(c.quarantine for c in shown):
        lines.append(f"confine: quarantine: {report.quarantine_dir}")
    return "\n".join(lines)

"""Git configuration, read the way git reads it: parse, render, sanitize.

A repository's `.git/config` is code: core.fsmonitor, core.pager, filter
drivers, aliases starting with `!` and a dozen more keys make git run a
program the next time a person types `git status` in the workdir.  So the
config of a repository created during a run is not trusted: it keeps only
keys on a safe list (plain data, nothing that names a program, a path git
would load, or a URL rewrite), and the parser follows git's own config.c, so
that what is checked is exactly what git would read (a parser that disagrees
with git is a way to smuggle a key past the check).  The snapshot also reads
the trusted, existing configs here to find what they point to in the workdir.
"""
from __future__ import annotations

import fnmatch
from collections import Counter
from typing import Callable, Sequence

from ..record import dataclass

__all__ = ["ConfigItem", "parse_git_config", "render_git_config", "sanitize_git_config",
           "is_dangerous_key", "is_safe_key", "vet_git_config"]


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


def sanitize_git_config(data: bytes, allow: Callable[[ConfigItem], bool] | None = None
                        ) -> tuple[bytes, list[ConfigItem], str | None]:
    """(new file, removed entries, parse error) keeping only `is_safe_key` entries
    (and those `allow` accepts: a submodule's core.worktree pointing back).
    Anything after a syntax error is dropped with the error reported."""
    items, err = parse_git_config(data)
    ok = [is_safe_key(it) or (allow is not None and allow(it)) for it in items]
    keep = [it for it, k in zip(items, ok, strict=True) if k]
    removed = [it for it, k in zip(items, ok, strict=True) if not k]
    return render_git_config(keep), removed, err


def vet_git_config(data: bytes, trusted: bytes | None = None,
                   allow: Callable[[ConfigItem], bool] | None = None
                   ) -> tuple[list[ConfigItem], str | None]:
    """The entries of a config the agent wrote that may not stay, and a
    syntax error (then the whole file is refused, as git refuses it).

    Every entry must be on the safe list, or be an entry of `trusted` (the
    config that was at this place when the run started, None for none): git
    rewrites the whole file for `git config`, `git remote add` or `push -u`,
    copying the person's own entries (core.hooksPath, filter drivers, an
    include) along, and those may stay, each as often as it was there and
    with the very same section, subsection, key and value. A NUL byte is
    refused: git never writes one, and C strings would end where this parser
    goes on. allow: entries judged by where the config is (a submodule's
    core.worktree pointing back to its own working tree, protect/gitlink.py)."""
    if b"\0" in data:
        return [], "a NUL byte"
    items, err = parse_git_config(data)
    if err is not None:
        return [], err
    allowed: Counter[tuple[str, str | None, str, str | None]] = Counter()
    if trusted is not None:
        for it in parse_git_config(trusted)[0]:
            if not is_safe_key(it):
                allowed[(it.section, it.sub, it.key, it.value)] += 1
    bad = []
    for it in items:
        if is_safe_key(it) or (allow is not None and allow(it)):
            continue
        k = (it.section, it.sub, it.key, it.value)
        if allowed[k] > 0:
            allowed[k] -= 1
        else:
            bad.append(it)
    return bad, None


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", ""}
_COMMAND_KEYS = ("core.fsmonitor", "core.pager", "core.editor", "core.sshcommand",
                 "core.askpass", "core.gitproxy", "core.alternaterefscommand", "diff.external",
                 "diff.*.command", "diff.*.textconv", "filter.*.clean", "filter.*.smudge",
                 "filter.*.process", "merge.*.driver", "credential.helper",
                 "credential.*.helper", "sequence.editor", "gpg.program", "gpg.*.program",
                 "gpg.ssh.defaultkeycommand", "pager.*", "interactive.difffilter")

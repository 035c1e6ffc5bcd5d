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

Some safe keys are safe only for some values, because they say where the
person's next `git push` or `git fetch` goes and what it does there:

- Locations (remote.*.url, remote.*.pushurl, submodule.*.url) must be
  network URLs: https://, http://, ssh://, git:// (git+ssh://, ssh+git://),
  or scp-like [user@]host:path, told apart from a path by git's own rule
  (connect.c url_is_local_not_ssh: a colon before any slash).  A local path
  or file:// makes git run git-receive-pack/upload-pack in a repository the
  agent may have made, with its hooks, as the person; `<transport>::` and
  unknown schemes run a git-remote-<helper> program (ext:: any command).
- Remote names (branch.*.remote, branch.*.pushremote, remote.pushDefault):
  git takes a name no remote of this config has a url for as a URL itself
  (remote.c add_url_alias), so the value must name such a remote (whose url
  is judged as above), be "." for a branch (the repository itself, whose own
  hooks are protected), or be a network URL.
- Refspecs that destroy upstream work: a remote.*.push starting with `+`
  (force) or `:dst` (delete), and remote.*.mirror true (force and delete
  everything).  A fetch refspec may force (the default
  `+refs/heads/*:refs/remotes/origin/*` does) but only into refs/remotes/:
  a destination elsewhere would overwrite the person's own branches or tags
  on the next fetch; pruneTags true deletes local tags the same way.

Each is refused unless it is exactly an entry the person had at start (the
`trusted` config of vet_git_config); `judge` gives the reason for each.
"""
from __future__ import annotations

import fnmatch
import re
from collections import Counter
from typing import Callable, Collection, Sequence

from ..record import dataclass

__all__ = ["ConfigItem", "parse_git_config", "render_git_config", "sanitize_git_config",
           "is_dangerous_key", "is_safe_key", "vet_git_config", "judge", "location_path",
           "KEY_REFUSED"]


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
    "remote": {"pushdefault"},
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
    return it.key in _SAFE_SUB.get(it.section, ())


def is_dangerous_key(it: ConfigItem) -> bool:
    name = it.name.lower()
    if it.section == "alias":
        return bool(it.value and it.value.lstrip().startswith("!"))
    return any(fnmatch.fnmatchcase(name, pat) for pat in _DANGEROUS)


# Why an entry is refused; the call's `confine:` line and the exit report say it.
KEY_REFUSED = "they could run programs for the next person using git there"
_URL_KEYS = {("remote", "url"), ("remote", "pushurl"), ("submodule", "url")}
_NAME_KEYS = {("branch", "remote"), ("branch", "pushremote"), ("remote", "pushdefault")}
# The transports git runs itself (transport.c transport_get); http(s) goes
# through git-remote-http(s), shipped with git.  Any other scheme runs
# git-remote-<scheme>, found on PATH.  Compared case-sensitively, as git does.
_NET_SCHEMES = ("https", "http", "ssh", "git", "git+ssh", "ssh+git")
_HELPER = re.compile(r"[A-Za-z0-9][A-Za-z0-9+.-]*::|::")        # transport.c: "<helper>::"
_SCHEME = re.compile(r"([A-Za-z0-9][A-Za-z0-9+.-]*)://")       # url.c is_url
_FALSE = {"false", "no", "off", "0", ""}
_PRUNE_TAGS = "pruneTags (the next fetch would delete your local tags)"


def _url_problem(v: str | None) -> str | None:
    """Why `v` is not a network URL git would connect to (None if it is)."""
    if v is None or not v.strip():
        return "an empty location"
    if _HELPER.match(v):
        return "a <transport>:: helper (git would run a program)"
    m = _SCHEME.match(v)
    if m:
        if m.group(1) == "file":
            return "a file:// URL (a local repository, whose hooks would run)"
        if m.group(1) not in _NET_SCHEMES:
            return "an unknown URL scheme (git would run git-remote-<scheme>)"
        auth = v[m.end():].split("/", 1)[0]
        return "a host starting with '-'" if auth.startswith("-") \
            or auth.rpartition("@")[2].startswith("-") else None
    colon, slash = v.find(":"), v.find("/")
    if colon < 0 or 0 <= slash < colon:
        return "a local path (a repository whose hooks would run as you)"
    if v.startswith("-") or v[:colon].rpartition("@")[2].startswith("-"):
        return "a host starting with '-'"
    return None


def _true(v: str | None) -> bool:
    """git_config_bool, failing closed: what is not plainly false is true."""
    return v is None or v.strip().lower() not in _FALSE


def _value_problem(it: ConfigItem, remotes: Collection[str]) -> str | None:
    sk, v = (it.section, it.key), it.value
    if sk in _URL_KEYS:
        why = _url_problem(v)
        return f"{why}: only a network URL (https://, ssh://, git://, host:path) may be set" \
            if why else None
    if sk in _NAME_KEYS:
        if (v == "." and it.section == "branch") or (v is not None and v in remotes):
            return None
        why = _url_problem(v)
        return f"it names no remote with a url in this config, so git takes it as a " \
            f"location: {why}" if why else None
    if it.section == "remote" and it.sub is not None:
        if it.key in ("push", "fetch") and v is None:
            return "an empty refspec"
        if it.key == "push" and v is not None:
            if v.startswith("+"):
                return "a push refspec that forces (overwrites upstream work on the next push)"
            if v.startswith(":") and v != ":":     # ":" alone is push.default=matching
                return "a push refspec that deletes upstream refs on the next push"
        if it.key == "fetch" and v is not None:
            src, colon, dst = v.lstrip("+").rpartition(":")     # as refspec.c splits it
            if colon and dst and not src.startswith("^") and (
                    not dst.startswith("refs/remotes/") or ".." in dst):
                return "a fetch refspec writing outside refs/remotes/ (the next fetch would " \
                    "overwrite your own branches or tags)"
        if it.key == "mirror" and _true(v):
            return "mirror (the next push would force and delete every upstream ref)"
        if it.key == "prunetags" and _true(v):
            return _PRUNE_TAGS
    if sk == ("fetch", "prunetags") and it.sub is None and _true(v):
        return _PRUNE_TAGS
    return None


def judge(items: Sequence[ConfigItem], trusted: Sequence[ConfigItem] = (),
          values: bool = True, allow: Callable[[ConfigItem], bool] | None = None
          ) -> list[tuple[ConfigItem, str]]:
    """The entries of `items` that may not stay, each with why, in order.

    An entry of `trusted` (the person's config at start) may stay as it was,
    each as often as it was there, with the very same section, subsection,
    key and value.  values=False judges keys only (the module docstring
    says which values of safe keys are refused). allow: entries judged by where
    the config is (a submodule's core.worktree pointing back to its own working
    tree, protect/gitlink.py)."""
    allowed: Counter[tuple[str, str | None, str, str | None]] = Counter(
        (t.section, t.sub, t.key, t.value) for t in trusted)
    why: dict[int, str] = {}

    def ok(i: int, it: ConfigItem, remotes: Collection[str]) -> bool:
        if allow is not None and allow(it):
            return True
        w = KEY_REFUSED if not is_safe_key(it) else \
            _value_problem(it, remotes) if values else None
        if w is None:
            return True
        k = (it.section, it.sub, it.key, it.value)
        if allowed[k] > 0:
            allowed[k] -= 1
            return True
        why[i] = w
        return False

    # Remote urls first: a remote's name is judged by whether a url of it stays.
    urls = {i: it.sub for i, it in enumerate(items)
            if (it.section, it.key) == ("remote", "url") and it.sub is not None}
    remotes = {sub for i, sub in urls.items() if ok(i, items[i], ())}
    for i, it in enumerate(items):
        if i not in urls:
            ok(i, it, remotes)
    return [(items[i], why[i]) for i in sorted(why)]


def sanitize_git_config(data: bytes, allow: Callable[[ConfigItem], bool] | None = None
                        ) -> tuple[bytes, list[tuple[ConfigItem, str]], str | None]:
    """(new file, removed entries with why, parse error) keeping only what
    `judge` accepts with nothing trusted (and `allow` accepts: see judge).
    Anything after a syntax error is dropped with the error reported."""
    items, err = parse_git_config(data)
    removed = judge(items, allow=allow)
    gone = {id(it) for it, _ in removed}
    return render_git_config([it for it in items if id(it) not in gone]), removed, err


def vet_git_config(data: bytes, trusted: bytes | None = None, values: bool = True,
                   allow: Callable[[ConfigItem], bool] | None = None
                   ) -> tuple[list[tuple[ConfigItem, str]], str | None]:
    """The entries of a config the agent wrote that may not stay, each with
    why, and a syntax error (then the whole file is refused, as git refuses it).

    Every entry must pass `judge`, or be an entry of `trusted` (the config
    that was at this place when the run started, None for none): git
    rewrites the whole file for `git config`, `git remote add` or `push -u`,
    copying the person's own entries (core.hooksPath, filter drivers, an
    include, a remote on a local path) along, and those may stay, each as
    often as it was there and with the very same section, subsection, key
    and value. A NUL byte is refused: git never writes one, and C strings
    would end where this parser goes on. allow: see judge."""
    if b"\0" in data:
        return [], "a NUL byte"
    items, err = parse_git_config(data)
    if err is not None:
        return [], err
    return judge(items, parse_git_config(trusted)[0] if trusted is not None else (), values,
                 allow), None


def location_path(it: ConfigItem) -> str | None:
    """The path a location entry names, on this machine or over ssh (which
    may be this machine), None for none: the exit check asks whether it lies
    where the agent could write. Relative to the repository, or to a home
    with a leading ~ (ssh://h/~/x, host:~/x, host:x). A value that can be a
    remote's name is not taken for a path here."""
    v = it.value
    if (it.section, it.key) not in _URL_KEYS | _NAME_KEYS or not v:
        return None
    if (it.section, it.key) in _NAME_KEYS and not set(v) & set("/:"):
        return None             # a remote's name (its url is judged), or "."
    m = _SCHEME.match(v)
    if m:
        rest = v[m.end():]
        path = rest[rest.find("/"):] if "/" in rest else ""
        return path[1:] if path.startswith("/~") else (path or None)
    colon, slash = v.find(":"), v.find("/")
    if colon < 0 or 0 <= slash < colon:
        return v
    path = v[colon + 1:]
    return path if path.startswith(("/", "~")) else ("~/" + path if path else None)


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", ""}
_COMMAND_KEYS = ("core.fsmonitor", "core.pager", "core.editor", "core.sshcommand",
                 "core.askpass", "core.gitproxy", "core.alternaterefscommand", "diff.external",
                 "diff.*.command", "diff.*.textconv", "filter.*.clean", "filter.*.smudge",
                 "filter.*.process", "merge.*.driver", "credential.helper",
                 "credential.*.helper", "sequence.editor", "gpg.program", "gpg.*.program",
                 "gpg.ssh.defaultkeycommand", "pager.*", "interactive.difffilter")

"""AppArmor and SELinux: enter the agent's profile or domain at exec.

The only module in confine that writes /proc/*/attr. Both LSMs take the
request now and apply it at the next execve(), so the launcher's child calls
these between fork and exec:

  * after the identity switch and dropping capabilities (neither resets the
    request, and neither needs it),
  * before no_new_privs: under no_new_privs AppArmor refuses to leave a
    confined profile (from unconfined, or a flags=(unconfined) launcher
    profile, it still works) and SELinux needs the nnp_transition permission
    that the exported module grants,
  * before Landlock restrict_self: the policy does not let the child write
    /proc, so the request could not be written afterwards.

Every failure raises OSError (fail closed): a profile that is not loaded
(ENOENT from the kernel), a context the policy rejects (EINVAL/EACCES). The
kernel checks the SELinux transition itself at execve(), which then fails
with EACCES rather than running the command unconfined.
"""
from __future__ import annotations

import errno
import os

from .sysfs import read_text

_AA_ENABLED = "/sys/module/apparmor/parameters/enabled"
_AA_FS = "/sys/kernel/security/apparmor"
_SE_FS = "/sys/fs/selinux"


def _read(path: str) -> str | None:
    return read_text(path)


def _attr(lsm: str | None, name: str) -> str:
    """/proc/thread-self/attr/<lsm>/<name> where the kernel has per-LSM files
    (5.8+, needed when several LSMs are stacked), else the shared file."""
    base = "/proc/thread-self/attr"
    if lsm and os.path.isdir(f"{base}/{lsm}"):
        return f"{base}/{lsm}/{name}"
    return f"{base}/{name}"


def _write_attr(path: str, data: bytes, what: str) -> None:
    # One write(2): the kernel parses the whole request from a single call.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as e:
        err = e.errno or errno.EIO
        raise OSError(err, f"{what}: cannot open {path}: {os.strerror(err)}") from None
    try:
        n = os.write(fd, data)
    except OSError as e:
        err = e.errno or errno.EIO
        hint = {errno.ENOENT: " (profile not loaded?)",
                errno.EINVAL: " (invalid or unknown context?)",
                errno.EACCES: " (policy forbids it)", errno.EPERM: " (policy forbids it)"}
        raise OSError(err, f"{what}: {os.strerror(err)}{hint.get(err, '')}") from None
    finally:
        os.close(fd)
    if n != len(data):
        raise OSError(errno.EIO, f"{what}: short write to {path}")


# --- AppArmor ---------------------------------------------------------------

def apparmor_enabled() -> bool:
    return (_read(_AA_ENABLED) or "").strip() == "Y" and os.path.isdir(_AA_FS)


def apparmor_profile_loaded(name: str) -> bool | None:
    """True/False when the kernel says, None when it cannot be read here
    (the list is root-only; change_onexec still fails with ENOENT then)."""
    text = _read(f"{_AA_FS}/profiles")
    if text is None:
        return None
    # Lines look like "confine-default (enforce)".
    return any(line.rsplit(" (", 1)[0] == name for line in text.splitlines())


def apparmor_change_onexec(name: str) -> None:
    """At the next execve() this task moves to profile `name` (aa_change_onexec)."""
    if not name or any(c.isspace() or c == "\0" for c in name):
        raise OSError(errno.EINVAL, f"apparmor: invalid profile name {name!r}")
    if not apparmor_enabled():
        raise OSError(errno.ENOSYS, "apparmor: not enabled in this kernel")
    _write_attr(_attr("apparmor", "exec"), f"exec {name}".encode(),
                f"apparmor: change_onexec {name}")


# --- SELinux ----------------------------------------------------------------

def selinux_enabled() -> bool:
    return os.path.exists(f"{_SE_FS}/enforce")


def selinux_current_context() -> str | None:
    text = _read(_attr("selinux", "current"))
    return text.strip().rstrip("\0") if text is not None else None


def selinux_context_with_type(type_: str, current: str | None = None) -> str:
    """The current context with its type replaced: unconfined_u:unconfined_r:
    unconfined_t:s0-s0:c0.c1023 -> ...:confine_agent_t:s0-s0:c0.c1023."""
    ctx = current if current is not None else selinux_current_context()
    parts = (ctx or "").split(":", 3)
    if len(parts) < 3:
        raise OSError(errno.EINVAL, f"selinux: cannot derive a context from {ctx!r}")
    parts[2] = type_
    return ":".join(parts)


def selinux_setexeccon(ctx: str) -> None:
    """At the next execve() this task enters `ctx` (setexeccon)."""
    if not ctx or "\0" in ctx or "\n" in ctx or ctx.count(":") < 2:
        raise OSError(errno.EINVAL, f"selinux: invalid context {ctx!r}")
    if not selinux_enabled():
        raise OSError(errno.ENOSYS, "selinux: not enabled in this kernel")
    path = _attr("selinux", "exec")
    _write_attr(path, ctx.encode(), f"selinux: setexeccon {ctx}")
    got = (_read(path) or "").strip().rstrip("\0")
    if got != ctx:  # the kernel canonicalises contexts; a different type would be a bug
        if got.split(":")[2:3] != ctx.split(":")[2:3]:
            raise OSError(errno.EINVAL, f"selinux: exec context reads back as {got!r}, not {ctx!r}")

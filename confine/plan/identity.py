"""Who the agent runs as. Started as root, never uid 0 unless asked by name."""
from __future__ import annotations

import os
import pwd

from ..errors import ConfineError
from ..record import dataclass, field


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    user: str
    home: str
    switch: bool               # supervisor is root: setgroups/setgid/setuid in the child
    started_as_root: bool
    dropped_groups: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {"uid": self.uid, "gid": self.gid, "user": self.user, "home": self.home,
                "supplementary_groups": [], "dropped_groups": list(self.dropped_groups),
                "switch_user": self.switch, "started_as_root": self.started_as_root}


def _lookup(user: str) -> pwd.struct_passwd:
    try:
        if user.isdigit():
            return pwd.getpwuid(int(user))
        return pwd.getpwnam(user)
    except KeyError:
        raise ConfineError(f"--user {user}: no such user") from None


def resolve(workdir: str, user: str | None) -> Identity:
    euid = os.geteuid()
    if euid != 0:
        me = pwd.getpwuid(euid)
        if user is not None and _lookup(user).pw_uid != euid:
            raise ConfineError("--user needs confine to be started as root "
                               f"(running as {me.pw_name})")
        groups = tuple(g for g in os.getgroups() if g != os.getegid())
        notes: tuple[str, ...] = ()
        if groups:
            notes = (f"supplementary groups {list(groups)} kept: dropping them needs root "
                     "(start confine as root with --user to drop them)",)
        return Identity(uid=euid, gid=os.getegid(), user=me.pw_name,
                        home=os.environ.get("HOME") or me.pw_dir, switch=False,
                        started_as_root=False, dropped_groups=(), notes=notes)
    if user is None:
        owner = os.stat(workdir).st_uid
        if owner == 0:
            raise ConfineError(f"workdir {workdir} is owned by root and confine does not run "
                               "agents as root by default; pass --user USER (the account the "
                               "agent should run as), or --user root to insist")
        try:
            pw = pwd.getpwuid(owner)
        except KeyError:
            raise ConfineError(f"workdir {workdir} is owned by uid {owner}, which has no "
                               "account; pass --user USER") from None
    else:
        pw = _lookup(user)
    return Identity(uid=pw.pw_uid, gid=pw.pw_gid, user=pw.pw_name, home=pw.pw_dir,
                    switch=True, started_as_root=True,
                    dropped_groups=tuple(sorted(set(os.getgroups()) - {pw.pw_gid})))

"""Ask (`network.default: ask`): moved to confine/approval/ (the engine for every kind).

Kept importable under its old names, so callers written against it go on
working; new code imports confine.approval.
"""
from __future__ import annotations

from ..approval.approvers import APPROVER_TIMEOUT, MAX_ANSWER, TTY_TIMEOUT
from ..approval.approvers import CommandApprover as CommandBackend
from ..approval.approvers import TtyApprover as TtyBackend
from ..approval.network import (
    ALLOW,
    DECISIONS,
    MAX_PENDING,
    MAX_REMEMBERED,
    ONCE_HOLD,
    Answer,
    Asker,
    Backend,
    Log,
    Question,
    make_asker,
)
from ..approval.profile import LOCK_WAIT, ProfileWriter, _builtin_dirs, insert_allow

__all__ = ["ALLOW", "APPROVER_TIMEOUT", "TTY_TIMEOUT", "Answer", "Asker", "Backend", "CommandBackend", "DECISIONS",
           "LOCK_WAIT", "Log", "MAX_ANSWER", "MAX_PENDING", "MAX_REMEMBERED", "ONCE_HOLD", "ProfileWriter",
           "Question", "TtyBackend", "_builtin_dirs", "insert_allow", "make_asker"]

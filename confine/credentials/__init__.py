"""Credentials the agent never holds (issue 24): placeholders in the agent's
environment and files, the real values kept by the supervisor and swapped in by
the gateway toward the hosts each is bound to; minted per run and revoked at
exit; an ssh-agent that lists and signs only what the profile names.

Imports one way: `policy`, `errors`, `paths`, `kernel`, `record`, the gateway's
host grammar (`gateway.rules`) and, from `use.py`'s `Judge` only, the run's approval
engine (`confine.approval`); the runtime calls
in (tests/unit/test_layers.py). The profile section is `policy/credentials.py`; the
person's guide is docs/credentials.md.
"""

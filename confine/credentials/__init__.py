"""Credentials the agent never holds (issue 24): placeholders in the agent's
environment and files, the real values kept by the supervisor and swapped in by
the gateway toward the hosts each is bound to; minted per run and revoked at
exit; an ssh-agent that lists and signs only what the profile names.

Imports one way: `policy`, `errors`, `paths`, `kernel`; the gateway and the
runtime call in, this package never imports them.
"""

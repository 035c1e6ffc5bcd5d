"""Credentials the agent never holds (issue 24): placeholders in the agent's
environment and files, the real values kept by the supervisor and swapped in by
the gateway toward the hosts each is bound to; minted per run and revoked at
exit; an ssh-agent that lists and signs only what the profile names.

Imports one way: `policy`, `errors`, `paths`, `kernel`, and of the gateway only its
pure parsers (`gateway.http1`, `gateway.rules`); the gateway (through its
`credentials=` hook, typed by a Protocol, never an import) and the runtime call in.
`ca.py` (the run CA) and `swap.py` (TLS termination and the swap) need the
`cryptography` package and the standard `ssl` module; nothing imports them for a
run without bindings.
"""

"""Seccomp user-notification mediation, both sides.

Landlock below ABI 9 does not mediate connect() to pathname unix sockets, and
seccomp cannot see a path; nor can Landlock refuse a protected *name* in a
writable workdir. So connect(), sendto() with an address, sendmsg(), listen()
and (with the name guard) the calls that make or write a name raise a seccomp
user notification, and nothing the agent asked for is ever resumed with
CONTINUE:

* supervisor.py (in the supervisor): copies the call's arguments out of the
  agent, takes its own references to the agent's descriptors, decides what it
  can (unix socket paths, listen) and hands the call to the broker;
* broker.py (the broker: forked by the agent's child after Landlock, so in the
  agent's own Landlock domain, not dumpable): performs socket calls;
  files.py judges file calls by the name guard and performs them;
* wire.py: the protocol between the two, the only thing both import.
"""
from .broker import broker_main
from .inet import InetRoutes
from .supervisor import Mediator

__all__ = ["InetRoutes", "Mediator", "broker_main"]

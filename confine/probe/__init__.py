"""Proof: `confine probe` attacks the sandbox from inside, `confine audit`
inspects the host from outside.

    from confine.probe import probe
    report = probe(profile="default", workdir="/srv/agent/repo")
    report["verdict"]        # "pass" only when nothing is possible and the sandbox works

battery.py is shipped as text and run inside the sandbox; run.py plants the
targets and runs it; report.py turns its JSON into the verdict and the table;
command.py holds the click commands.
"""
from .run import probe  # noqa: F401

__all__ = ["probe"]

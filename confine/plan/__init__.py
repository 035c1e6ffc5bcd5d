"""Policy + identity + host facts -> a frozen Plan (see compile.py)."""
from .compile import Lsm, Missing, Plan, Protected, compile, missing_features
from .steps import Step
from .host import HostFacts

__all__ = ["HostFacts", "Lsm", "Missing", "Plan", "Protected", "Step", "compile",
           "missing_features"]

"""Policy + identity + host facts -> a frozen Plan (see compile.py)."""
from .compile import Lsm, Missing, Plan, Protected, compile, mechanisms, missing_features
from .host import HostFacts
from .steps import Step

__all__ = ["HostFacts", "Lsm", "Missing", "Plan", "Protected", "Step", "compile",
           "mechanisms", "missing_features"]

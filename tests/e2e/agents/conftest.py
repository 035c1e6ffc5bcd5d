"""Fixtures of the agent CLI tests: the pinned CLIs (scripts/test-deps-agents.sh), the
account whose home they use, and the network they reach the mock model through.

Network: confine and the CLI run in a namespace A whose only link is a veth to a
namespace B, where the mock model listens; A's resolver is an address in B where nothing
answers DNS, so the gateway's look-ups of the CLIs' own hosts (api.anthropic.com,
ab.chatgpt.com) fail on this machine and nothing leaves it.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

NPM_PREFIX = os.environ.get("CONFINE_AGENTS_NPM_PREFIX", "/opt/confine-test-agents-npm")
AGENT_USER = "confine-agent"
NS_A, NS_B = "confine-agents-a", "confine-agents-b"
A_IP, B_IP, PORT = "10.231.22.1", "10.231.22.2", 8080
MODEL = f"{B_IP}:{PORT}"
COMMAND = "echo ok > proof.txt"
HERE = os.path.dirname(os.path.abspath(__file__))
_SKIPPED: list[str] = []


def skip_loudly(reason: str) -> None:
    if reason not in _SKIPPED:
        _SKIPPED.append(reason)
    pytest.skip(reason)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    for reason in _SKIPPED:
        terminalreporter.write_line(f"AGENT CLI TESTS SKIPPED: {reason}", yellow=True, bold=True)


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    for item in items:
        if HERE in str(item.path):
            item.add_marker(pytest.mark.agents)


@pytest.fixture(scope="session")
def agent_clis() -> str:
    """The bin directory of the pinned CLIs, or a loud skip saying why they are not there."""
    if os.geteuid() != 0:
        skip_loudly("needs root (network namespaces, the agent account)")
    for name in ("claude", "codex"):
        if not os.access(os.path.join(NPM_PREFIX, "bin", name), os.X_OK):
            skip_loudly(f"{NPM_PREFIX}/bin/{name} missing: scripts/test-deps-agents.sh could not "
                        "install it from npm (npm or its registry unreachable?)")
    if shutil.which("ip") is None:
        skip_loudly("needs iproute2 (ip netns)")
    return os.path.join(NPM_PREFIX, "bin")


@pytest.fixture(scope="session")
def agent_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(AGENT_USER)
    except KeyError:
        pytest.fail(f"account {AGENT_USER} missing: run scripts/test-deps-agents.sh as root")


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _down() -> None:
    for ns in (NS_A, NS_B):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    shutil.rmtree(f"/etc/netns/{NS_A}", ignore_errors=True)


class Model:
    """The mock model server in namespace B; `requests()` reads what it received."""

    def __init__(self, log: str):
        self.log = log

    def requests(self) -> list[dict]:
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [e for e in map(json.loads, f) if "method" in e]

    def tool_results(self) -> list[str]:
        """What the CLI sent back as the command's result (either protocol)."""
        out = []
        for r in self.requests():
            body = r.get("body") or {}
            for m in body.get("messages", []):
                for c in m.get("content") if isinstance(m.get("content"), list) else []:
                    if isinstance(c, dict) and c.get("type") == "tool_result":
                        out.append(json.dumps(c.get("content")))
            for i in body.get("input") or []:
                if isinstance(i, dict) and i.get("type") == "function_call_output":
                    out.append(json.dumps(i.get("output")))
        return out

    def clear(self) -> None:
        open(self.log, "w").close()


@pytest.fixture(scope="session")
def model(agent_clis: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    _down()
    log = str(tmp_path_factory.mktemp("model") / "requests.jsonl")
    server = None
    try:
        _sh("ip", "netns", "add", NS_A)
        _sh("ip", "netns", "add", NS_B)
        _sh("ip", "-n", NS_A, "link", "add", "cfag-a", "type", "veth", "peer", "name", "cfag-b",
            "netns", NS_B)
        _sh("ip", "-n", NS_A, "addr", "add", f"{A_IP}/30", "dev", "cfag-a")
        _sh("ip", "-n", NS_B, "addr", "add", f"{B_IP}/30", "dev", "cfag-b")
        for ns, dev in ((NS_A, "cfag-a"), (NS_B, "cfag-b")):
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        os.makedirs(f"/etc/netns/{NS_A}", exist_ok=True)
        with open(f"/etc/netns/{NS_A}/resolv.conf", "w") as f:
            f.write(f"nameserver {B_IP}\n")   # nothing answers there: names do not resolve
        server = subprocess.Popen(["ip", "netns", "exec", NS_B, sys.executable,
                                   os.path.join(HERE, "mock_model.py"), B_IP, str(PORT), log,
                                   COMMAND], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 15
        while not (os.path.exists(log) and os.path.getsize(log)):
            assert server.poll() is None and time.monotonic() < end, "mock model did not start"
            time.sleep(0.05)
        yield Model(log)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        _down()


def in_netns(argv: list[str]) -> list[str]:
    """argv run in namespace A, where the model is reachable and nothing else is."""
    return ["ip", "netns", "exec", NS_A, *argv]

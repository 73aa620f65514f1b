"""Helpers for the sweep tests: real playbook runs through ansible-runner (as AWX runs them),
and the fault-injecting proxy as a real process (fixture in conftest.py).

Every process started here runs in its own session and is killed by its process group.
Traffic goes to 127.0.0.1 only.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner

ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
PACKAGE = MODULE_UTILS / "specbench_client"
PROXY = Path(__file__).resolve().parent / "faultproxy.py"
# ansible-runner looks ansible-playbook up on this process's PATH.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
sys.path.insert(0, str(MODULE_UTILS))

import bench_scripts  # noqa: E402 - builds the one file the node runs
import specbench_client as sc  # noqa: E402 - the client core, as a plain package (no Ansible)

__all__ = ["CLIENT", "PACKAGE", "FaultProxy", "Run", "analytic", "build_client", "free_port", "run_playbook", "sc"]


def build_client(folder: Path) -> Path:
    """The client as the node gets it: ``specbench_client.pyz`` built from the package, as
    bench_scripts builds it when it ships."""
    path = Path(folder) / "specbench_client.pyz"
    path.write_bytes(bench_scripts.zipapp_bytes(str(PACKAGE)))
    path.chmod(0o755)
    return path


_BUILT = Path(tempfile.mkdtemp(prefix="specbench-client-"))
atexit.register(shutil.rmtree, _BUILT, True)
CLIENT = build_client(_BUILT)  # what the script tests run: the shipped artefact, not the sources


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def analytic(base_url: str, concurrency: int, input_len: int, output_len: int) -> dict:
    url = f"{base_url}/emulator/analytic?concurrency={concurrency}&input_len={input_len}&output_len={output_len}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@dataclass
class Run:
    """One finished playbook run."""

    runner: object
    results_dir: Path
    run_id: str
    stdout: str
    events: list = field(default_factory=list)

    @property
    def rc(self) -> int:
        return self.runner.rc

    def results(self, host: str, mode: str) -> dict:
        return json.loads((self.results_dir / self.run_id / host / f"{mode}.json").read_text())

    def results_path(self, host: str, mode: str) -> Path:
        return self.results_dir / self.run_id / host / f"{mode}.json"

    def facts(self, host: str) -> dict:
        """Facts the host's tasks returned (ansible_facts of each ok result), merged in order."""
        out: dict = {}
        for ev in self.events:
            data = ev.get("event_data", {})
            res = data.get("res")
            if ev.get("event") == "runner_on_ok" and data.get("host") == host and isinstance(res, dict):
                out.update(res.get("ansible_facts") or {})
        return out

    def failures(self) -> dict[str, str]:
        """host -> the failure message of its failed task."""
        out = {}
        for ev in self.events:
            if ev.get("event") == "runner_on_failed" and not ev["event_data"].get("ignore_errors"):
                data = ev["event_data"]
                out[data["host"]] = str(data["res"].get("msg", ""))
        return out

    def artifacts_text(self) -> str:
        """Everything ansible-runner kept of the run (stdout, events, facts)."""
        folder = Path(self.runner.config.artifact_dir)
        parts = []
        for path in folder.rglob("*"):
            if path.is_file():
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)


def run_playbook(tmp_path: Path, hosts: dict[str, dict], extravars: dict | None = None,
                 playbook: Path = ROOT / "bench.yml", cmdline: str | None = None, forks: int = 10,
                 name: str = "t1") -> Run:
    """Run ``playbook`` through ansible-runner against local ``hosts`` (name -> host vars);
    ``name`` is the run id and the runner folder, one per run in a test."""
    pdd = tmp_path / f"runner-{name}"
    (pdd / "inventory").mkdir(parents=True, exist_ok=True)
    inventory = {"all": {"hosts": {
        name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **hvars}
        for name, hvars in hosts.items()}}}
    inv_path = pdd / "inventory" / "hosts.json"
    inv_path.write_text(json.dumps(inventory))
    results_dir = tmp_path / "results"
    run_id = name
    extra = {"results_dir": str(results_dir), "run_id": run_id, **(extravars or {})}
    runner = ansible_runner.run(
        private_data_dir=str(pdd), playbook=str(playbook), inventory=str(inv_path), extravars=extra,
        envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORKS": str(forks),
                 "ANSIBLE_NOCOLOR": "1"},
        quiet=True, cmdline=cmdline, timeout=600,
    )
    stdout = runner.stdout.read()
    return Run(runner, results_dir, run_id, stdout, list(runner.events))


class FaultProxy:
    def __init__(self, port: int, target_port: int, mode: str, after: int):
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, str(PROXY), "--port", str(port), "--target-port", str(target_port), "--mode", mode,
             "--after", str(after)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        line = self.proc.stdout.readline()
        if b"READY" not in line:
            raise RuntimeError(f"fault proxy did not start: {line!r}")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

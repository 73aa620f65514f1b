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
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import specbench_testkit as kit
from specbench_testkit import PlaybookRun, free_port, inventory, local_host

ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
PACKAGE = MODULE_UTILS / "specbench_client"
PROXY = Path(__file__).resolve().parent / "faultproxy.py"
# ansible-runner looks ansible-playbook up on this process's PATH.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
sys.path.insert(0, str(MODULE_UTILS))

import specbench_client as sc  # noqa: E402 - the client core, as a plain package (no Ansible)

from ansible_collections.specbench.core.plugins.module_utils.node import scripts as bench_scripts  # noqa: E402

__all__ = ["CLIENT", "PACKAGE", "FaultProxy", "Run", "analytic", "build_client", "free_port", "kept_up_level",
           "run_playbook", "sc"]


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


def analytic(base_url: str, concurrency: int, input_len: int, output_len: int) -> dict:
    url = f"{base_url}/emulator/analytic?concurrency={concurrency}&input_len={input_len}&output_len={output_len}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def kept_up_level(settings: dict, concurrency: int, server: dict, retries: int = 3) -> dict:
    """One level through the sweep's own loop (``sc.sweep``), which measures a level the machine did
    not keep up with (``level["saturated"]``, specbench_client.keepup) again, ``retries`` times at
    most. The test fails naming why when it never kept up, never on a figure the machine set.
    Three retries: beside the suite and three loops (load 8 on 2 cores) a C=260 level's workers
    were starved (2% of a core each, data read 18.4 ms after it arrived) through both of two tries."""
    level = sc.sweep(dict(settings, concurrency=[concurrency], saturated_retries=retries), server)[0]
    assert not level.get("saturated"), (f"C={concurrency}: the machine did not keep up in {retries + 1} tries: "
                                        + "; ".join(level["saturated"]))
    return level


class Run(PlaybookRun):
    """A bench.yml run read in the sweep tests' terms: ``results(host, mode)`` is the mode's results
    file, ``failures()`` maps each failed host to its message (the kit's failed_hosts)."""

    def results(self, host: str, mode: str) -> dict:  # type: ignore[override]
        return self.mode_results(host, mode)

    def results_path(self, host: str, mode: str) -> Path:
        return self.results_file(host, mode)

    def failures(self) -> dict[str, str]:  # type: ignore[override]
        return self.failed_hosts()


def run_playbook(tmp_path: Path, hosts: dict[str, dict], extravars: dict | None = None,
                 playbook: Path = ROOT / "bench.yml", cmdline: str | None = None, forks: int = 10,
                 name: str = "t1") -> Run:
    """Run ``playbook`` through the test kit against local ``hosts`` (name -> host vars), results
    under ``tmp_path/results``; ``name`` is the run id and the runner folder, one per run in a test."""
    extra = {"results_dir": str(tmp_path / "results"), "run_id": name, **(extravars or {})}
    run = kit.run_playbook(tmp_path, playbook, inventory({host: local_host(**hvars) for host, hvars in hosts.items()}),
                           extra, cmdline=cmdline, forks=forks, name=f"runner-{name}", timeout=600)
    return Run(run.rc, run.status, run.events, run.stdout, run.pdd, run.extravars)


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

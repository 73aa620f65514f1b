"""Playbook runs for the compare tests, the way AWX runs them (ansible_runner.run).

Each run gets its own private data folder under the test's tmp_path, the checkout's
ansible.cfg (so specbench.core resolves to the working tree) and this venv on PATH.
Emulated hosts get a node folder, a port and a device folder of their own under tmp_path;
``kill_node_servers`` stops only the processes recorded there or holding its device files.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import ansible_runner
import yaml
from specbench_testkit import holders_of  # noqa: F401 - one implementation, re-exported for the compare tests

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
EMULATOR = ROOT / "files" / "sglang_emulator"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """A finished ansible-runner run: rc, status, events, stdout, and its private data folder."""

    def __init__(self, rc: int, status: str, events: list, stdout: str, pdd: Path):
        self.rc, self.status, self.events, self.stdout, self.pdd = rc, status, events, stdout, Path(pdd)

    @classmethod
    def of(cls, runner, pdd: Path) -> Run:
        return cls(runner.rc, runner.status, list(runner.events), runner.stdout.read(), pdd)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"rc": self.rc, "status": self.status, "events": self.events,
                                    "stdout": self.stdout, "pdd": str(self.pdd)}))

    @classmethod
    def load(cls, path: Path) -> Run:
        data = json.loads(path.read_text())
        return cls(data["rc"], data["status"], data["events"], data["stdout"], Path(data["pdd"]))

    def results(self, event: str) -> list[tuple[str, str, dict]]:
        out = []
        for ev in self.events:
            if ev.get("event") == event:
                data = ev.get("event_data", {})
                out.append((data.get("host"), data.get("task", ""), data.get("res", {})))
        return out

    def failures(self) -> list[tuple[str, str, str]]:
        """(host, task, message) of every failed task, rescued ones included."""
        return [(h, t, str(r.get("msg", ""))) for h, t, r in self.results("runner_on_failed")]

    def task_started(self, fragment: str) -> list[str]:
        """Hosts on which a task whose name contains ``fragment`` started."""
        hosts = []
        for ev in self.events:
            data = ev.get("event_data", {})
            if ev.get("event") in ("runner_on_start",) and fragment in data.get("task", ""):
                hosts.append(data.get("host"))
        return hosts

    def stats(self) -> dict:
        for ev in reversed(self.events):
            if ev.get("event") == "playbook_on_stats":
                return ev.get("event_data", {})
        return {}

    def artifact_stats(self) -> dict:
        """The set_stats data (per_host: false) as AWX reads it: the stats event's artifact_data."""
        return self.stats().get("artifact_data") or {}


def run_playbook(tmp: Path, playbook: str, inventory: dict | str | None = None, extravars: dict | None = None,
                 envvars: dict | None = None, check: bool = False, timeout: int = 300, limit: str | None = None) -> Run:
    tmp.mkdir(parents=True, exist_ok=True)
    pdd = tmp / f"runner-{len(list(tmp.glob('runner-*')))}"
    pdd.mkdir()
    kwargs = {}
    if inventory is not None:
        inv = pdd / "inventory.yml"
        inv.write_text(inventory if isinstance(inventory, str) else yaml.safe_dump(inventory))
        kwargs["inventory"] = str(inv)
    env = {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(pdd / "ansible-local"),
        "ANSIBLE_REMOTE_TEMP": str(pdd / "ansible-remote"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp / "home"),
        **(envvars or {}),
    }
    runner = ansible_runner.run(
        private_data_dir=str(pdd),
        project_dir=str(ROOT),
        playbook=playbook,
        extravars=extravars or {},
        envvars=env,
        cmdline="--check" if check else None,
        limit=limit,
        quiet=True,
        timeout=timeout,
        **kwargs,
    )
    return Run.of(runner, pdd)


def shared_run(tmp_path_factory, name: str, build) -> tuple[Run, Path]:
    """Run ``build(folder)`` once per test session, even when pytest-xdist spreads the tests that
    share it over several workers: the first worker runs it under a lock, the others read the
    saved run. Returns (run, folder)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = folder / "run.json"
        if record.is_file():
            return Run.load(record), folder
        folder.mkdir(exist_ok=True)
        run = build(folder)
        run.save(record)
        return run, folder


def node_vars(node_dir: Path, port: int, profile: str = "kimi-k2.5-8x-rtx-pro-6000", time_scale: float = 0.1,
              **more) -> dict:
    """Host variables for one emulated node confined to ``node_dir`` (its own port and device folder)."""
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "engine": "emulator",
        "specbench_node_dir": str(node_dir),
        "specbench_emulator_device_dir": str(node_dir / "emulated-dev"),
        "sglang_server_emulator_python": sys.executable,
        "sglang_server_emulator_profile": profile,
        "sglang_server_emulator_time_scale": time_scale,
        "sglang_server_emulator_load_seconds": 0.3,
        "sglang_server_port": port,
        "sglang_server_launcher": "session",
        "sglang_server_ready_timeout": 120,
        "gpu_clean_timeout_s": 20,
        "gpu_term_timeout_s": 5,
        # The teardown's pattern step matches command lines machine-wide: scope it to this node's
        # folder, so that one emulated host never kills another's server (or another test's).
        "gpu_kill_patterns": [re.escape(str(node_dir))],
        **more,
    }


def inventory(hosts: dict[str, dict]) -> dict:
    return {"all": {"hosts": hosts}}


def _starttime(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def kill_node_servers(node_dir: Path) -> list[int]:
    """SIGKILL what a test's node folder recorded or whose device files it holds; nothing else.

    A recorded group is signalled only while its leader is still the recorded process (same
    start time) and its command line names this node folder.
    """
    killed = []
    state = node_dir / "state" / "server.json"
    if state.is_file():
        try:
            rec = json.loads(state.read_text())
            pid, pgid = int(rec.get("pid") or 0), int(rec.get("pgid") or 0)
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().decode(errors="replace")
            same = rec.get("starttime") is None or str(_starttime(pid)) == str(rec.get("starttime"))
            if pgid > 1 and same and str(node_dir) in cmd:
                os.killpg(pgid, signal.SIGKILL)
                killed.append(pgid)
        except (OSError, ValueError, TypeError):
            pass
    dev = node_dir / "emulated-dev"
    for _ in range(50):
        pids = holders_of(dev) - {os.getpid()} if dev.is_dir() else set()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return killed

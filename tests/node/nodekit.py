"""Helpers for the node-role tests: playbooks through ansible-runner, and cleanup of the servers.

Playbooks run the way AWX runs them (ansible_runner.run with a private data folder per run),
with this checkout's ansible.cfg, so `specbench.core.*` resolves to the working tree.
Servers a test launched are found through the state files and emulated device folder under
that test's own tmp_path, and only those are killed.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import ansible_runner
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
FAKES = Path(__file__).resolve().parent / "fakes"
VENV_BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.specbench.core.plugins.module_utils import proc_table  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """One finished ansible-runner run: rc, status, events, and failures by task."""

    def __init__(self, runner):
        self.runner = runner
        self.rc = runner.rc
        self.status = runner.status
        self.events = list(runner.events)
        self.stdout = runner.stdout.read()

    def results(self, event: str) -> list[tuple[str, str, dict]]:
        """(host, task name, result) for every event of this type (e.g. runner_on_ok)."""
        out = []
        for ev in self.events:
            if ev.get("event") == event:
                data = ev.get("event_data", {})
                out.append((data.get("host"), data.get("task", ""), data.get("res", {})))
        return out

    def failures(self) -> list[tuple[str, str]]:
        """(task name, message) of every failed task, rescued ones included."""
        return [(task, res.get("msg", "")) for _, task, res in self.results("runner_on_failed")]

    def changed(self, host: str | None = None) -> list[str]:
        """Names of tasks that reported a change (items count once per task)."""
        names = []
        for h, task, res in self.results("runner_on_ok") + self.results("runner_item_on_ok"):
            if (host is None or h == host) and res.get("changed"):
                names.append(task)
        return sorted(set(names))

    def stats(self) -> dict:
        for ev in reversed(self.events):
            if ev.get("event") == "playbook_on_stats":
                return ev.get("event_data", {})
        return {}


def run_playbook(tmp: Path, playbook: Path | str, inventory: dict | str, extravars: dict | None = None,
                 envvars: dict | None = None, check: bool = False, timeout: int = 540) -> Run:
    """Run a playbook through ansible-runner in a fresh private data folder under ``tmp``."""
    tmp.mkdir(parents=True, exist_ok=True)
    pdd = Path(tmp) / f"runner-{len(list(tmp.glob('runner-*')))}"
    pdd.mkdir()
    inv = pdd / "inventory.yml"
    inv.write_text(inventory if isinstance(inventory, str) else yaml.safe_dump(inventory))
    env = {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(pdd / "ansible-local"),
        "ANSIBLE_REMOTE_TEMP": str(pdd / "ansible-remote"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        **(envvars or {}),
    }
    runner = ansible_runner.run(
        private_data_dir=str(pdd),
        project_dir=str(ROOT),
        playbook=str(playbook),
        inventory=str(inv),
        extravars=extravars or {},
        envvars=env,
        cmdline="--check" if check else None,
        quiet=True,
        timeout=timeout,
    )
    return Run(runner)


def localhost_inventory(**hostvars) -> dict:
    return {"all": {"hosts": {"localhost": {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        **hostvars,
    }}}}


def emulator_vars(node_dir: Path, port: int, **more) -> dict:
    """Role variables for a fast emulated launch confined to ``node_dir``."""
    return {
        "engine": "emulator",
        "specbench_node_dir": str(node_dir),
        "sglang_server_emulator_path": str(ROOT / "files" / "sglang_emulator"),
        "sglang_server_emulator_python": sys.executable,
        "sglang_server_emulator_profile": "llama-3.1-8b-1x-h100",
        "sglang_server_emulator_time_scale": 0.05,
        "sglang_server_emulator_load_seconds": 0.2,
        "sglang_server_tp_size": 1,
        "sglang_server_port": port,
        "sglang_server_launcher": "session",
        "sglang_server_ready_timeout": 120,
        **more,
    }


def state_files(node_dir: Path) -> list[Path]:
    return sorted((node_dir / "state").glob("server*.json")) if (node_dir / "state").is_dir() else []


def kill_servers(node_dir: Path) -> list[int]:
    """SIGKILL every server group recorded under ``node_dir``, then any holder of its device folders.

    A recorded group is signalled only while its leader is the recorded process (pid and start
    time) and its command line names this test's folder: never someone else's processes.
    """
    killed = []
    for path in state_files(node_dir):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        pid, pgid, start = record.get("pid"), record.get("pgid"), record.get("starttime")
        info = proc_table.read_proc(int(pid)) if pid else None
        if not pgid or info is None or info.starttime != start or str(node_dir) not in info.command:
            continue
        try:
            os.killpg(int(pgid), signal.SIGKILL)
            killed.append(int(pgid))
        except ProcessLookupError:
            pass
    for dev in node_dir.glob("**/nvidiactl"):
        nodes = proc_table.expand_nodes(str(dev.parent / "nvidia*"))
        for pid in proc_table.holders(nodes):
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
    return killed


def wait_gone(pids: list[int], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(proc_table.alive(p) for p in pids):
        time.sleep(0.05)


def cases_playbook(path: Path, cases: dict[str, dict], role: str = "specbench.core.sglang_server",
                   record: str = "specbench_server") -> Path:
    """Write a playbook with one play per case: each runs ``role`` with the case's variables
    and records the outcome in ``{{ specbench_node_dir }}/cases/<name>.json`` (failed, task, msg
    or the variable ``record``, by default the fact), so one ansible-runner run covers many cases.

    A case is ``{"vars": {...}, "tasks_from": "main", "check": False}``.
    """
    plays = []
    for name, case in cases.items():
        outfile = "{{ specbench_node_dir }}/cases/" + name + ".json"
        plays.append({
            "name": f"Test | Case {name}",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": case.get("vars", {}),
            "tasks": [{
                "name": f"Test | Try {name}",
                "check_mode": bool(case.get("check", False)),
                "block": [
                    {"name": "Test | Run the role", "ansible.builtin.include_role": {
                        "name": role, "tasks_from": case.get("tasks_from", "main")}},
                    {"name": "Test | Record the success", "ansible.builtin.copy": {
                        "content": "{{ {'failed': false, 'fact': " + record + " | default(none)} | to_nice_json }}",
                        "dest": outfile, "mode": "0644"}, "check_mode": False},
                ],
                "rescue": [
                    {"name": "Test | Record the failure", "ansible.builtin.copy": {
                        "content": "{{ {'failed': true, 'task': ansible_failed_task.name, "
                                   "'msg': ansible_failed_result.msg | default('')} | to_nice_json }}",
                        "dest": outfile, "mode": "0644"}, "check_mode": False},
                ],
            }],
        })
    path.write_text(yaml.safe_dump(plays, sort_keys=False, width=200))
    return path


def case_outcomes(node_dir: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((node_dir / "cases").glob("*.json"))}


def snapshot_sources(dest: Path) -> Path:
    """A frozen copy of what bench_scripts ships by default (same layout as the collection root),
    so a test compares against files nobody edits while it runs; use as bench_scripts_source_root."""
    import shutil

    shutil.copytree(ROOT / "files" / "sglang_emulator", dest / "files" / "sglang_emulator",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    client = ROOT / "plugins" / "module_utils" / "specbench_client.py"
    if client.exists():
        (dest / "plugins" / "module_utils").mkdir(parents=True)
        shutil.copy2(client, dest / "plugins" / "module_utils" / "specbench_client.py")
    return dest

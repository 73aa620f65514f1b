"""The node-role tests' defaults over the test kit (specbench_testkit): a localhost inventory, a
fast emulated launch confined to the test's node folder, many role cases in one playbook run.

Playbooks run through ``specbench_testkit.run_playbook`` (ansible-runner, as AWX runs them);
servers a test launched are killed by ``specbench_testkit.kill_node_servers`` through that
test's own node folder (fixture ``node_dir`` in conftest.py).
"""
from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

from specbench_testkit import ROOT, case_outcomes, cases_playbook, free_port, inventory, local_host, run_playbook

sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table  # noqa: E402

PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
FAKES = Path(__file__).resolve().parent / "fakes"

__all__ = ["FAKES", "PLAYBOOKS", "ROOT", "case_outcomes", "cases_playbook", "emulator_vars", "flock_free", "free_port",
           "localhost_inventory", "proc_table", "run_playbook", "snapshot_sources"]


def flock_free(path) -> bool:
    """Whether nobody holds the flock on ``path`` (taken and given back at once when free)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def localhost_inventory(**hostvars) -> dict:
    return inventory({"localhost": local_host(**hostvars)})


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


def snapshot_sources(dest: Path) -> Path:
    """A frozen copy of what bench_scripts ships by default (same layout as the collection root),
    so a test compares against files nobody edits while it runs; use as bench_scripts_source_root."""
    import shutil

    shutil.copytree(ROOT / "files" / "sglang_emulator", dest / "files" / "sglang_emulator",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(ROOT / "plugins" / "module_utils" / "specbench_client",
                    dest / "plugins" / "module_utils" / "specbench_client",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest

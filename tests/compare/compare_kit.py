"""The compare tests' defaults over the test kit (specbench_testkit): an emulated host confined to
its own node folder, port and device folder, and playbook runs with their own HOME.

Playbooks run through ``specbench_testkit.run_playbook`` (ansible-runner, as AWX runs them);
``specbench_testkit.kill_node_servers`` stops only what a host's node folder recorded or whose
device files it holds.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import specbench_testkit as kit
from specbench_testkit import local_host


def run_playbook(tmp: Path, playbook: str, inventory: dict | str | None = None, extravars: dict | None = None,
                 envvars: dict | None = None, check: bool = False, timeout: int = 300,
                 limit: str | None = None) -> kit.PlaybookRun:
    """``specbench_testkit.run_playbook`` with HOME in ``tmp`` (the unreachable SSH host's known_hosts
    and ~/.ansible stay out of the user's home)."""
    return kit.run_playbook(tmp, playbook, inventory, extravars, envvars=envvars, check=check, timeout=timeout,
                            limit=limit, home=tmp / "home")


def node_vars(node_dir: Path, port: int, profile: str = "kimi-k2.5-8x-rtx-pro-6000", time_scale: float = 0.1,
              **more) -> dict:
    """Host variables for one emulated node confined to ``node_dir`` (its own port and device folder);
    ``more`` adds to them or overrides them."""
    defaults = dict(
        engine="emulator",
        specbench_node_dir=str(node_dir),
        specbench_emulator_device_dir=str(node_dir / "emulated-dev"),
        sglang_server_emulator_python=sys.executable,
        sglang_server_emulator_profile=profile,
        sglang_server_emulator_time_scale=time_scale,
        sglang_server_emulator_load_seconds=0.3,
        sglang_server_port=port,
        sglang_server_launcher="session",
        sglang_server_ready_timeout=120,
        gpu_clean_timeout_s=20,
        gpu_term_timeout_s=5,
        # The teardown's pattern step matches command lines machine-wide: scope it to this node's
        # folder, so that one emulated host never kills another's server (or another test's).
        gpu_kill_patterns=[re.escape(str(node_dir))],
        # A level the machine did not keep up with (keepup.saturation) is measured again, up to three
        # times: beside vLLM's CPU engine on two cores the emulator stalled through two attempts of
        # one 3-s level (0.59-0.84 s, then up to 0.28 s of its schedule lost), and the test, rightly,
        # failed with that reason. A level that keeps up is measured once, as before.
        bench_saturated_retries=3,
    )
    return local_host(**{**defaults, **more})


def not_kept_up(host_dir: Path) -> list[str]:
    """Every level where the machine did not keep up, across a host's results files
    (``<mode>.json`` and ``<mode>@<tag>.json``): ``"<file> C=<c>: <reason>"``, from each level's
    ``saturated`` (specbench_client.keepup: the client's CPU, the emulator's delivered rate against
    its own analytic model). A test on the emulator asserts this is empty before it judges a
    verdict, so a machine too loaded for the run fails with that reason, never with a wrong verdict."""
    import json

    found = []
    for path in sorted(host_dir.glob("*.json")):
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("specbench.bench_sweep"):
            continue
        for level in doc.get("levels") or []:
            found += [f"{path.name} C={level.get('concurrency')}: {why}" for why in level.get("saturated") or []]
    return found

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The teardown sequence (docs: ../shared/docs/gpu-teardown.md), one implementation.

Scope ``own`` (the default) signals a process only if it is

(a) in the process tree this project launched: the recorded server's descendants (pid and
    start time match), process group and session;
(b) holding memory on a target GPU, as the driver lists compute processes (NVML, nvidia-smi,
    the emulated records), verified against the GPU's device node it holds open;
(c) on a target GPU whose memory the driver attributes to no visible process: holding that
    GPU's device node and matching the engine's patterns;

and, in every case, owned by the user the teardown runs as. Another user's process holding
memory on a target GPU is refused (named, left alive) unless ``kill_other_users``. Holders of
the device nodes without memory (nvtop, nvidia-smi, exporters, the MPS control daemon) are
reported as left running. Scope ``node`` is the seeds' ``fuser -k``: every process matching the
engine's patterns and every holder of a target GPU's nodes, any user, except the never-kill list.

Order: the launched tree gets SIGTERM (wait); its survivors and (b)/(c) (``node``: the pattern
matches) SIGTERM, wait, SIGKILL, wait; then a fresh look at the GPUs (``node``: the device
holders) the same way; then every target GPU is polled until clean. No fixed sleep anywhere.

Patterns match what a process is (its process title or kernel name, program, the Python module
it runs, the script an interpreter runs), never a word somewhere in its arguments: ``tail -f
sglang.launch_server.log`` and ``bash -c '... sglang.launch_server ...'`` are not SGLang.

Never signalled: this process, its descendants and ancestors, the rest of the Ansible run's
process tree, Ansible programs, the never-kill list, processes the backend cannot see, and
processes in another PID namespace (another container, or the containers when run on the
Proxmox host: tear a container down inside it, through ``pct exec``). Signals go through a
pidfd after checking the start time, so a reused pid is never hit; a signal the kernel
refuses (another user's process) is a structured refusal, never an exception.
"""
from __future__ import annotations

import os
import signal
import time

from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state, proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown.clean import ProveClean
from ansible_collections.specbench.core.plugins.module_utils.teardown.holders import (
    FindHolders,
    defunct,
    is_controller,
    my_pid,
    never_kill_match,
    protected,
)
from ansible_collections.specbench.core.plugins.module_utils.teardown.record import (
    RecordedTree,
    recorded_pgid,
    recorded_server,
    recorded_servers,
    void_reason,
)
from ansible_collections.specbench.core.plugins.module_utils.teardown.respawn import Respawns, boot_ticks
from ansible_collections.specbench.core.plugins.module_utils.teardown.settings import (
    DEFAULT_KILL_PATTERNS,
    DEFAULT_NEVER_KILL,
    ENGINE_KILL_PATTERNS,
    SCOPES,
    Pattern,
    TeardownInputError,
    check_names,
    check_number,
    check_scope,
    compile_patterns,
)
from ansible_collections.specbench.core.plugins.module_utils.teardown.signals import Signalling
from ansible_collections.specbench.core.plugins.module_utils.teardown.words import MONITOR, ResultWords

# what callers use from here (the steps live in the teardown_*.py files)
__all__ = [
    "DEFAULT_KILL_PATTERNS", "DEFAULT_NEVER_KILL", "ENGINE_KILL_PATTERNS", "MONITOR", "SCOPES", "Pattern", "Teardown",
    "TeardownInputError", "check_names", "check_number", "check_scope", "compile_patterns", "defunct",
    "is_controller", "my_pid", "never_kill_match", "protected", "recorded_pgid", "recorded_server", "recorded_servers",
    "void_reason",
]


class Teardown(RecordedTree, FindHolders, Signalling, ProveClean, Respawns, ResultWords):
    """One teardown run. ``clock``/``sleep`` are injectable for the benchmark."""

    def __init__(self, backend, device_glob, *, idle_mib=64, never_kill=None, kill_patterns=None,
                 server_pgid=None, server_state_file=None, server_record=None, server_state_dir=None,
                 kill_scope="own",
                 kill_other_users=False, devices=None, term_timeout_s=15.0, kill_timeout_s=10.0,
                 clean_timeout_s=60.0, poll_interval_s=0.05, settle_s=0.1, respawn_watch_s=3.0,
                 specbench_units=None, check_mode=False,
                 clock=time.monotonic, sleep=time.sleep):
        self.warnings: list[str] = []
        self.backend = backend
        self.device_glob = device_glob
        self.idle_mib = int(check_number("gpu_idle_mib", idle_mib, 0, strict=False))
        self.never_kill = check_names(DEFAULT_NEVER_KILL if never_kill is None else never_kill)
        self.patterns = compile_patterns(DEFAULT_KILL_PATTERNS if kill_patterns is None else kill_patterns)
        self.scope = check_scope(kill_scope)
        if not isinstance(kill_other_users, bool):
            raise TeardownInputError(f"gpu_kill_other_users is {kill_other_users!r}: it must be true or false.")
        self.kill_other_users = kill_other_users
        self.devices = self._check_devices(devices)
        self.term_timeout = check_number("gpu_term_timeout_s", term_timeout_s, 0)
        self.kill_timeout = check_number("gpu_kill_timeout_s", kill_timeout_s, 0)
        self.clean_timeout = check_number("gpu_clean_timeout_s", clean_timeout_s, 0)
        self.poll_interval = check_number("gpu_poll_interval_s", poll_interval_s, 0)
        self.settle = check_number("gpu_settle_s", settle_s, 0, strict=False)
        self.respawn_watch = check_number("gpu_respawn_watch_s", respawn_watch_s, 0, strict=False)
        self.specbench_units = check_names([] if specbench_units is None else specbench_units,
                                           "gpu_specbench_units", "['specbench-serve-*']")
        self.respawns: list[dict] = []  # targets that started after this teardown began, traced
        self.respawn_failure: dict | None = None
        self.units_stopped: list[str] = []
        self.began_ticks = boot_ticks()
        self.clean_read_at: float | None = None  # a clean stretch that a later read contradicted
        if self.poll_interval > self.clean_timeout:
            raise TeardownInputError(
                f"gpu_poll_interval_s {poll_interval_s} is longer than gpu_clean_timeout_s {clean_timeout_s}: "
                "poll more often than the deadline (the default is 0.05 s)."
            )
        # every launch to take down: the fact given, and each record file naming another launch
        named_nothing: list[str] = []
        self.records = recorded_servers(server_record, server_pgid, server_state_file, server_state_dir,
                                        self.warnings, named_nothing)
        first = self.records[0] if self.records else None
        self.server = first.server if first else dict.fromkeys(
            ("pid", "pgid", "sid", "starttime", "boot_id", "gpus"))
        # no launch to take down: say which records named nothing (retired, untrusted), if any
        self.server_source = first.source if first else "; ".join(named_nothing) or "none recorded"
        self.pgid = self.server["pgid"]
        self.pgid_source = self.server_source
        self.table_now: dict = {}  # the last process table read
        self.graphics_pids: set[int] = set()  # listed by the driver as graphics processes
        self.stuck: set[int] = set()  # outlived SIGKILL in state D
        self.gave_up_at: float | None = None
        self.kills_done: float = 0.0
        self.mapping_warned = False
        self.check_mode = check_mode
        self.clock = clock
        self.sleep = sleep
        self.uid = os.geteuid()
        self.namespace = proc_table.pid_namespace("self")
        self.targets: dict[int, dict] = {}  # pid -> {"info", "step", "signals"}
        self.skipped: dict[int, dict] = {}
        self.refused: dict[int, dict] = {}
        self.problems: list[dict] = []
        self.protected: dict[int, str] = {}
        self.target_gpus: list[int] = []
        self.log: list[str] = []
        self._idents: dict[tuple, dict] = {}

    @staticmethod
    def _check_devices(devices) -> list:
        if devices in (None, "", []):
            return []
        if not isinstance(devices, list):
            devices = [devices]
        for item in devices:
            ok = (isinstance(item, int) and not isinstance(item, bool) and item >= 0) or (
                isinstance(item, str) and item.strip() and (item.strip().isdigit() or "-" in item)
            )
            if not ok:
                raise TeardownInputError(
                    f"gpu_devices item {item!r} is neither a GPU index (0, 1, ...) nor a GPU UUID (GPU-...): "
                    "list the target GPUs as nvidia-smi -L shows them, or leave gpu_devices empty for all."
                )
        return devices

    # ---- the run

    def _select(self, table, gpus) -> list:
        """Steps 2 and 3: (b) and (c) for scope own; the pattern matches for scope node."""
        if self.scope == "node":
            return self.pattern_matches(table, gpus)
        memory, unattributed = self.memory_holders(table, gpus)
        return memory + [i for i in self.engine_holders(table, gpus, unattributed) if i.pid not in
                         {m.pid for m in memory}]

    def rewalk(self, table, gpus) -> list[int]:
        """What would be signalled now and has not been: the recorded tree, then (scope own) the
        memory holders, (scope node) the pattern matches and the device holders."""
        found = [(self.launched_tree(table), "launched")]
        if self.scope == "node":
            found += [(self.pattern_matches(table, gpus), "pattern"), (self.device_holders(table, gpus), "holder")]
        else:
            found += [(self._select(table, gpus), "memory")]
        fresh = []
        for infos, step in found:
            for pid in self._add(infos, step):
                if pid not in fresh and not self.targets[pid]["signals"] and self._alive(pid):
                    fresh.append(pid)
        return fresh

    def run(self) -> dict:
        started = self.clock()
        backend = self.backend
        table = self._refresh()
        gpus = self.read_gpus()
        self.target_gpus = gpu_state.resolve_devices(gpus, self.devices)
        before = gpu_state.read_state(backend, self.device_glob, self.idle_mib, table, self.devices, gpus)
        if self.check_mode:
            return self._dry_run(table, gpus, before, started)

        # 1. the launched tree: SIGTERM and wait
        tree = self.launched_tree(table)
        self._add(tree, "launched")
        self._signal([i.pid for i in tree], signal.SIGTERM)
        if tree:
            self._wait([i.pid for i in tree], self.term_timeout)

        # 2. its survivors, what it left behind, and the memory holders (scope node: the patterns):
        # TERM, wait, KILL, wait
        table = self._refresh()
        gpus = self.read_gpus()
        step2 = [p for p in self.targets if self._alive(p)]
        step = "pattern" if self.scope == "node" else "memory"
        found = [(self.launched_tree(table), "launched")]
        found += [(self.pattern_matches(table, gpus) if self.scope == "node" else self._select(table, gpus), step)]
        for infos, step in found:
            step2 += [p for p in self._add(infos, step) if p not in step2]
        if step2:
            # what started since this teardown began came back (a successor forked on SIGTERM): SIGKILL
            back = self.came_back([p for p in step2 if not self.targets[p]["signals"]], table)
            self._escalate(step2, back=set(back))
        kills_done = self.kills_done = self.clock()

        # 3. re-walk (scope node: with every holder of the target GPUs' nodes, the fuser step) and
        # signal what is new, until every target GPU reads clean for the settle interval
        clean_at = self.wait_clean(kills_done + self.clean_timeout)

        table = proc_table.snapshot()
        after = gpu_state.read_state(backend, self.device_glob, self.idle_mib, table, self.devices)
        self.report_monitors(table, after["gpus"])
        if self.scope == "own":
            self.report_patterns(table)
        result = self._result(before, after, started)
        result["time_to_clean_s"] = round(clean_at - kills_done, 4) if clean_at is not None else None
        result["clean"] = clean_at is not None and after["clean"]
        if clean_at is not None and not after["clean"]:
            self.clean_read_at = clean_at
        result["respawns"] = self.respawns
        result["units_stopped"] = self.units_stopped
        retired = self.retire_record(table)
        result["recorded_server_retired"] = bool(retired)
        result["records_retired"] = retired
        if not result["clean"]:
            result["msg"] = self.failure(after, table)
            result["problems"] = self.problems
        else:
            result["msg"] = self._summary(result)
        return result

    def _dry_run(self, table, gpus, before, started) -> dict:
        plan = []
        steps = [("launched", self.launched_tree(table))]
        if self.scope == "node":
            steps += [("pattern", self.pattern_matches(table, gpus)), ("holder", self.device_holders(table, gpus))]
        else:
            steps += [("memory", self._select(table, gpus))]
        for step, infos in steps:
            for info in infos:
                if info.pid not in self.refused and all(p["pid"] != info.pid for p in plan):
                    plan.append({**info.as_dict(), "step": step, "signal": "SIGTERM, then SIGKILL if it stays"})
        self.report_monitors(table, gpus)
        for item in plan:
            self.skipped.pop(item["pid"], None)
        result = self._result(before, before, started)
        result.update(
            respawns=[],
            units_stopped=[],
            recorded_server_retired=False,
            records_retired=[],
            would_kill=plan,
            clean=before["clean"] and not self.refused,
            time_to_clean_s=None,
            msg=f"check mode: would signal {len(plan)} process(es); killed nothing"
            + (f"; would refuse {len(self.refused)}: " + "; ".join(self._refusal_lines()) if self.refused else ""),
        )
        return result

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The teardown sequence (docs: ../shared/docs/gpu-teardown.md), one implementation.

1. The recorded server process group: SIGTERM every member, wait (deadline).
2. Survivors of the group and processes whose full command line matches a kill pattern:
   SIGTERM the new ones, wait, SIGKILL all survivors, wait (deadlines).
3. Holders of the explicit device nodes (what fuser -v lists): the same TERM, wait, KILL.
4. Poll every GPU at a short interval until each is at or under the idle threshold and
   lists no compute process, or the deadline passes. No fixed sleep anywhere.

Never signalled: this process, its descendants, its ancestors (the Ansible worker,
ansible-playbook, ...), the rest of the Ansible controller's process tree, any process
whose argv[0] or argv[1] is an Ansible program (their command lines carry -e text that
may contain the kill patterns), the never-kill list, and processes the backend cannot
see. Signals go through a pidfd after checking the process's start time, so a reused pid
is never hit.
"""
from __future__ import annotations

import json
import os
import re
import signal
import time

from ansible_collections.specbench.core.plugins.module_utils import gpu_state, proc_table

DEFAULT_NEVER_KILL = [
    "nvidia-persistenced",
    "nv-hostengine",
    "dcgm-exporter",
    "nv-fabricmanager",
    "nvidia-cuda-mps-control",
    "Xorg",
]
DEFAULT_KILL_PATTERNS = ["sglang::", "sglang.launch_server", "sglang serve", "sglang_emulator"]
SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGKILL: "SIGKILL"}
CONTROLLER_PREFIXES = ("ansible", "ansible-playbook", "ansible-runner", "ansible-pull", "awx")

D_STATE_ADVICE = (
    "stuck in the driver (state D): no signal can reach it until it leaves the driver; only a "
    "GPU reset (nvidia-smi --gpu-reset -i <gpu>, with no other process on that GPU) or a reboot "
    "of the node frees it"
)
OUTSIDE_ADVICE = (
    "held outside this PID namespace (by the Proxmox host or another container): it cannot be "
    "freed from here; run the teardown on the Proxmox host, which sees every container's "
    "processes, or inside the container that holds it (pct exec <vmid> -- ...)"
)


class TeardownInputError(ValueError):
    """A bad setting: the message names it and says how to fix it."""


# --------------------------------------------------------------------------- settings


def compile_patterns(patterns) -> list[re.Pattern]:
    if not isinstance(patterns, list):
        raise TeardownInputError("gpu_kill_patterns must be a list of regular expressions, e.g. ['sglang::'].")
    compiled = []
    for i, pat in enumerate(patterns):
        if not isinstance(pat, str) or not pat.strip():
            raise TeardownInputError(
                f"gpu_kill_patterns[{i}] is {pat!r}: each pattern must be a non-empty regular expression "
                "matched against full command lines, e.g. 'sglang::'."
            )
        try:
            rx = re.compile(pat)
        except re.error as exc:
            raise TeardownInputError(
                f"gpu_kill_patterns[{i}] {pat!r} is not a valid regular expression ({exc}): escape special "
                "characters with a backslash, e.g. 'sglang\\.launch_server'."
            ) from exc
        if rx.search("") is not None:
            raise TeardownInputError(
                f"gpu_kill_patterns[{i}] {pat!r} matches an empty command line, so it would match every "
                "process: use a pattern that names the server, e.g. 'sglang::'."
            )
        compiled.append(rx)
    return compiled


def check_names(never_kill) -> list[str]:
    if not isinstance(never_kill, list) or not all(isinstance(n, str) and n.strip() for n in never_kill):
        raise TeardownInputError(
            "gpu_never_kill must be a list of non-empty process names, e.g. ['nvidia-persistenced', 'Xorg']."
        )
    return list(never_kill)


def check_number(name: str, value, minimum: float, strict: bool = True) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < minimum or (strict and number == minimum):
        bound = f"greater than {minimum:g}" if strict else f"at least {minimum:g}"
        raise TeardownInputError(f"{name} is {value!r}: it must be a number {bound}.")
    return number


def recorded_pgid(server_pgid, state_file: str | None, warnings: list[str]) -> tuple[int | None, str]:
    """The server's recorded process group, and where it came from."""
    if server_pgid not in (None, ""):
        try:
            pgid = int(server_pgid)
        except (TypeError, ValueError) as exc:
            raise TeardownInputError(
                f"server_pgid {server_pgid!r} is not a process group id: pass specbench_server.pgid (an integer)."
            ) from exc
        source = "specbench_server.pgid"
    elif state_file and os.path.exists(state_file):
        try:
            with open(state_file, encoding="utf-8") as fh:
                record = json.load(fh)
            pgid = int(record["pgid"])
        except (OSError, ValueError, TypeError, KeyError) as exc:
            warnings.append(
                f"{state_file} has no readable pgid ({exc.__class__.__name__}: {exc}); the recorded-group "
                "step is skipped (the pattern and device-holder steps still run). Delete or fix the file."
            )
            return None, state_file
        source = state_file
    else:
        return None, "none recorded"
    if pgid <= 1:
        warnings.append(f"recorded process group {pgid} (from {source}) is not a server's group; skipped.")
        return None, source
    return pgid, source


# --------------------------------------------------------------------------- who is off limits


def is_controller(info: proc_table.ProcInfo) -> bool:
    """An Ansible/AWX program (argv[0], or argv[1] behind an interpreter)."""
    for arg in info.cmdline[:2]:
        base = os.path.basename(arg)
        if base.startswith(CONTROLLER_PREFIXES):
            return True
    return False


def protected(table: dict, me: int | None = None) -> dict[int, str]:
    """{pid: reason} for processes this teardown must never signal."""
    me = os.getpid() if me is None else me
    reasons = {me: "this teardown's own process"}
    for pid in proc_table.descendants(me, table):
        reasons[pid] = "a child of this teardown"
    chain = proc_table.ancestors(me, table)
    for pid in chain:
        reasons.setdefault(pid, "an ancestor of this teardown (the Ansible worker, ansible-playbook, its callers)")
    # the controller's whole tree: ansible-playbook and its other workers
    for pid in chain:
        info = table.get(pid)
        if info is not None and is_controller(info):
            top = pid
            for higher in chain[chain.index(pid) + 1 :]:
                hinfo = table.get(higher)
                if hinfo is not None and is_controller(hinfo):
                    top = higher
            for child in proc_table.descendants(top, table):
                reasons.setdefault(child, "part of this Ansible run (a worker of ansible-playbook)")
            break
    return reasons


def never_kill_match(info: proc_table.ProcInfo, names: list[str]) -> str | None:
    for name in names:
        if name in (info.comm, info.exe_name) or info.comm == name[:15]:
            return name
    return None


# --------------------------------------------------------------------------- the sequence


class Teardown:
    """One teardown run. ``clock``/``sleep`` are injectable for the benchmark."""

    def __init__(self, backend, device_glob, *, idle_mib=64, never_kill=None, kill_patterns=None,
                 server_pgid=None, server_state_file=None, term_timeout_s=15.0, kill_timeout_s=10.0,
                 clean_timeout_s=60.0, poll_interval_s=0.05, check_mode=False, clock=time.monotonic,
                 sleep=time.sleep):
        self.warnings: list[str] = []
        self.backend = backend
        self.device_glob = device_glob
        self.idle_mib = int(check_number("gpu_idle_mib", idle_mib, 0, strict=False))
        self.never_kill = check_names(DEFAULT_NEVER_KILL if never_kill is None else never_kill)
        self.patterns = compile_patterns(DEFAULT_KILL_PATTERNS if kill_patterns is None else kill_patterns)
        self.term_timeout = check_number("gpu_term_timeout_s", term_timeout_s, 0)
        self.kill_timeout = check_number("gpu_kill_timeout_s", kill_timeout_s, 0)
        self.clean_timeout = check_number("gpu_clean_timeout_s", clean_timeout_s, 0)
        self.poll_interval = check_number("gpu_poll_interval_s", poll_interval_s, 0)
        if self.poll_interval > self.clean_timeout:
            raise TeardownInputError(
                f"gpu_poll_interval_s {poll_interval_s} is longer than gpu_clean_timeout_s {clean_timeout_s}: "
                "poll more often than the deadline (the default is 0.05 s)."
            )
        self.pgid, self.pgid_source = recorded_pgid(server_pgid, server_state_file, self.warnings)
        self.check_mode = check_mode
        self.clock = clock
        self.sleep = sleep
        self.targets: dict[int, dict] = {}  # pid -> {"info", "step", "signals"}
        self.skipped: dict[int, dict] = {}
        self.protected: dict[int, str] = {}
        self.log: list[str] = []

    # ---- selection

    def _refresh(self) -> dict:
        table = proc_table.snapshot()
        self.protected = protected(table)
        return table

    def _allowed(self, info, why: str) -> bool:
        """May this process be signalled? Records why not."""
        reason = self.protected.get(info.pid)
        if reason is None and info.pid in self.backend.hidden_pids():
            reason = "not visible in this PID namespace"
        if reason is None:
            name = never_kill_match(info, self.never_kill)
            if name:
                reason = f"on gpu_never_kill ({name})"
        if reason is None and why == "pattern" and is_controller(info):
            reason = "an Ansible program (its command line carries -e text)"
        if reason is None:
            return True
        self.skipped.setdefault(info.pid, {**info.as_dict(), "reason": reason, "step": why})
        return False

    def _matches(self, info) -> bool:
        return any(rx.search(info.command) for rx in self.patterns)

    def group_members(self, table) -> list:
        if self.pgid is None:
            return []
        members = [info for info in table.values() if info.pgid == self.pgid and info.state not in ("Z", "X")]
        nodes = set(proc_table.expand_nodes(self.device_glob))
        owned = any(self._matches(m) or proc_table.open_nodes(m.pid, nodes, m.state, m.threads) for m in members)
        if members and not owned:
            self.warnings.append(
                f"recorded process group {self.pgid} ({self.pgid_source}) no longer looks like the server: no "
                "member matches gpu_kill_patterns or holds a device node (a stale record whose group id was "
                "reused?); it is left alone."
            )
            return []
        return [m for m in members if self._allowed(m, "group")]

    def pattern_matches(self, table) -> list:
        return [
            i for i in table.values()
            if i.state not in ("Z", "X") and self._matches(i) and self._allowed(i, "pattern")
        ]

    def device_holders(self, table) -> list:
        held = proc_table.holders(proc_table.expand_nodes(self.device_glob), table)
        return [table[pid] for pid in sorted(held) if self._allowed(table[pid], "holder")]

    # ---- signalling

    def _add(self, infos, step):
        for info in infos:
            self.targets.setdefault(info.pid, {"info": info, "step": step, "signals": []})

    def _alive(self, pid) -> bool:
        t = self.targets[pid]
        return not t["info"].gone()

    def _signal(self, pids, sig):
        for pid in pids:
            t = self.targets[pid]
            if not self._alive(pid):
                continue
            name = SIGNAL_NAMES[sig]
            if self.backend.deliverable(pid):
                if not proc_table.send_signal(pid, t["info"].starttime, sig):
                    continue
            t["signals"].append(name)
            self.log.append(f"{name} pid {pid} ({t['step']}): {t['info'].command[:200]}")

    def _wait(self, pids, timeout) -> list[int]:
        """Wait until all of pids are gone or the deadline passes; the survivors."""
        deadline = self.clock() + timeout
        while True:
            alive = [p for p in pids if self._alive(p)]
            if not alive or self.clock() >= deadline:
                return alive
            self.sleep(self.poll_interval)

    def _escalate(self, pids):
        """TERM those not yet asked, wait; KILL every survivor, wait."""
        fresh = [p for p in pids if not self.targets[p]["signals"]]
        self._signal(fresh, signal.SIGTERM)
        if fresh:
            self._wait(fresh, self.term_timeout)
        survivors = [p for p in pids if self._alive(p)]
        self._signal([p for p in survivors if "SIGKILL" not in self.targets[p]["signals"]], signal.SIGKILL)
        return self._wait(survivors, self.kill_timeout) if survivors else []

    # ---- the run

    def run(self) -> dict:
        started = self.clock()
        backend = self.backend
        table = self._refresh()
        before = gpu_state.read_state(backend, self.device_glob, self.idle_mib, table)
        if self.check_mode:
            return self._dry_run(table, before, started)

        # 1. the recorded group: SIGTERM and wait
        group = self.group_members(table)
        self._add(group, "group")
        self._signal([i.pid for i in group], signal.SIGTERM)
        if group:
            self._wait([i.pid for i in group], self.term_timeout)

        # 2. group survivors and the server's patterns: TERM the new ones, KILL the rest
        table = self._refresh()
        step2 = [p for p, t in self.targets.items() if self._alive(p)]
        matches = self.pattern_matches(table)
        self._add(matches, "pattern")
        step2 += [i.pid for i in matches if i.pid not in step2]
        if step2:
            self._escalate(step2)

        # 3. holders of the device nodes (the fuser step)
        table = self._refresh()
        holders = self.device_holders(table)
        self._add(holders, "holder")
        if holders:
            self._escalate([i.pid for i in holders])
        kills_done = self.clock()

        # 4. poll every GPU until clean
        clean_at = self.wait_clean(kills_done + self.clean_timeout)

        table = proc_table.snapshot()
        after = gpu_state.read_state(backend, self.device_glob, self.idle_mib, table)
        result = self._result(before, after, started)
        result["time_to_clean_s"] = round(clean_at - kills_done, 4) if clean_at is not None else None
        result["clean"] = clean_at is not None and after["clean"]
        if not result["clean"]:
            result["msg"] = self.failure(after, table)
        else:
            result["msg"] = self._summary(result)
        return result

    def wait_clean(self, deadline: float) -> float | None:
        """Read every GPU each poll interval until all are clean; the clock then, or None."""
        while True:
            gpus = self.backend.read_gpus()
            if not any(gpu_state.is_dirty(g, self.idle_mib) for g in gpus):
                return self.clock()
            if self.clock() >= deadline:
                return None
            self.sleep(self.poll_interval)

    def _dry_run(self, table, before, started) -> dict:
        plan = []
        for step, infos in (
            ("group", self.group_members(table)),
            ("pattern", self.pattern_matches(table)),
            ("holder", self.device_holders(table)),
        ):
            for info in infos:
                if all(p["pid"] != info.pid for p in plan):
                    plan.append({**info.as_dict(), "step": step, "signal": "SIGTERM, then SIGKILL if it stays"})
        result = self._result(before, before, started)
        result.update(
            would_kill=plan,
            clean=before["clean"],
            time_to_clean_s=None,
            msg=f"check mode: would signal {len(plan)} process(es); killed nothing",
        )
        return result

    def _result(self, before, after, started) -> dict:
        killed = []
        for t in self.targets.values():
            if not t["signals"]:
                continue
            killed.append({
                **t["info"].as_dict(),
                "step": t["step"],
                "signals": t["signals"],
                "signal": t["signals"][-1],
                "exited": t["info"].gone(),
            })
        return {
            "backend": self.backend.name,
            "before": before,
            "after": after,
            "killed": killed,
            "would_kill": [],
            "left_alone": sorted(self.skipped.values(), key=lambda s: s["pid"]),
            "recorded_pgid": self.pgid,
            "recorded_pgid_source": self.pgid_source,
            "log": self.log,
            "warnings": self.warnings,
            "elapsed_s": round(self.clock() - started, 4),
        }

    def _summary(self, result) -> str:
        gpus = len(result["after"]["gpus"])
        if not result["killed"]:
            return f"{gpus} GPU(s) clean; nothing to kill"
        names = ", ".join(f"{k['pid']} ({k['signal']})" for k in result["killed"])
        return f"{gpus} GPU(s) clean {result['time_to_clean_s']}s after the last holder exited; killed {names}"

    # ---- the failure text

    def describe(self, pid, table, why="") -> str:
        info = table.get(pid)
        if info is None:
            return f"pid {pid} (not in this PID namespace: a host PID or another container's)"
        state = self.backend.state_of(pid) or info.state
        if state == "D":
            text = D_STATE_ADVICE
        elif state == "Z":
            text = "defunct (state Z): it holds nothing itself; its threads or children may"
        else:
            text = f"state {state} ({proc_table.STATE_TEXT.get(state, state)})"
        extra = f"; {why}" if why else ""
        return f"pid {pid} {text}{extra}: {info.command[:300]}"

    def failure(self, after, table) -> str:
        lines = [
            f"GPUs not clean after {self.clean_timeout:g}s (threshold {self.idle_mib} MiB, backend "
            f"{self.backend.name}); do not benchmark on them."
        ]
        hidden = self.backend.hidden_pids()
        for gpu in after["gpus"]:
            if not gpu_state.is_dirty(gpu, self.idle_mib):
                continue
            used = gpu["memory_used_mib"]
            visible = [p for p in gpu["processes"] if p["pid"] in table and p["pid"] not in hidden]
            count = len(gpu["processes"])
            lines.append(f"GPU {gpu['index']} ({gpu['uuid']}): {used} MiB used, {count} compute process(es).")
            for proc in gpu["processes"]:
                why = self.skipped.get(proc["pid"], {}).get("reason", "")
                lines.append(f"  {self.describe(proc['pid'], table, why)}")
            attributed = sum(p["used_memory_mib"] or 0 for p in visible)
            if not visible and (used or 0) > self.idle_mib:
                lines.append(f"  {used} MiB with no process visible here: {OUTSIDE_ADVICE}.")
            elif all(p["used_memory_mib"] is not None for p in visible) and used - attributed > self.idle_mib:
                lines.append(f"  {used - attributed} MiB not attributable to a visible process: {OUTSIDE_ADVICE}.")
        survivors = sorted(p for p, t in self.targets.items() if self._alive(p))
        listed = {p["pid"] for g in after["gpus"] for p in g["processes"]}
        for holder in after["holders"]:
            if holder["pid"] not in survivors and holder["pid"] not in self.skipped:
                survivors.append(holder["pid"])
        for pid in survivors:
            if pid in listed:
                continue
            lines.append(f"Still holding the device nodes: {self.describe(pid, table)}")
        return "\n".join(lines)

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Finding holders: who is off limits, what a process is and whose, and who holds the target
GPUs (their memory, their device nodes, the engine's patterns)."""
from __future__ import annotations

import os

from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state, proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown.settings import (
    CONTROLLER_PREFIXES,
    DISPLAY_SERVERS,
    GPU_NODE,
)
from ansible_collections.specbench.core.plugins.module_utils.teardown.signals import run_as_fix
from ansible_collections.specbench.core.plugins.module_utils.teardown.words import (
    DISPLAY_REASON,
    ELSEWHERE,
    MONITOR,
    OTHER_USER_FIX,
    SHARED_ONLY,
)


def is_controller(info: proc_table.ProcInfo) -> bool:
    """An Ansible/AWX program (argv[0], or argv[1] behind an interpreter)."""
    for arg in info.cmdline[:2]:
        base = os.path.basename(arg)
        if base.startswith(CONTROLLER_PREFIXES):
            return True
    return False


def ansible_job(info: proc_table.ProcInfo, table: dict) -> bool:
    """A process of an Ansible run (this one's or another job's): an Ansible program, a module
    (AnsiballZ, its ansible-tmp folder) or below one, or the shell Ansible runs a pipelined
    module in (``/bin/sh -c '... python... && sleep 0'``) and what runs under it."""
    chain = [info.pid, *proc_table.ancestors(info.pid, table)]
    for pid in chain:
        anc = table.get(pid) if pid != info.pid else info
        if anc is None:
            continue
        text = anc.command
        if is_controller(anc) or "AnsiballZ_" in text or "/ansible-tmp-" in text:
            return True
        if anc.exe_name in ("sh", "bash", "dash") and len(anc.cmdline) >= 3 and anc.cmdline[1] == "-c" \
                and anc.cmdline[2].rstrip().endswith("&& sleep 0"):
            return True
    return False


def my_pid() -> int:
    """This process's pid as /proc shows it (the same as os.getpid() unless /proc is another
    PID namespace's)."""
    try:
        return int(os.readlink(f"{proc_table.PROC}/self"))
    except (OSError, ValueError):
        return os.getpid()


def protected(table: dict, me: int | None = None) -> dict[int, str]:
    """{pid: reason} for processes this teardown must never signal."""
    me = my_pid() if me is None else me
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


def defunct(info: proc_table.ProcInfo) -> bool:
    """Dead or a zombie holding nothing ("Zl", a defunct leader whose threads run, is alive)."""
    return info.state == "X" or (info.state == "Z" and info.threads <= 1)


def never_kill_match(info: proc_table.ProcInfo, names: list[str]) -> str | None:
    for name in names:
        if name in (info.comm, info.exe_name) or info.comm == name[:15]:
            return name
    return None


class FindHolders:
    """Steps (b) and (c) of gpu_teardown.Teardown, and scope node's pattern and holder steps."""

    def identity(self, info) -> dict:
        key = (info.pid, info.starttime)
        if key not in self._idents:
            self._idents[key] = proc_table.identity(info, proc_table.exe_path(info.pid))
        return self._idents[key]

    def matches(self, info) -> bool:
        ident = self.identity(info)
        return any(p.matches(ident, info.command) for p in self.patterns)

    def mine(self, info) -> bool:
        return info.uid == self.uid

    def _refresh(self) -> dict:
        table = proc_table.snapshot()
        self.protected = protected(table)
        self.table_now = table
        return table

    def _skip(self, info, step, reason, kind=None):
        """Left alone, and why; ``kind`` is the problem kind should it hold a target GPU's memory."""
        if info.pid not in self.targets and info.pid not in self.refused:
            self.skipped.setdefault(info.pid, {**info.as_dict(), "reason": reason, "step": step})
            if kind:
                self.skipped[info.pid].setdefault("kind", kind)

    def _exempt(self, info, step: str, candidate: bool = True) -> bool:
        """Off limits whatever the scope (records why); False when it may be considered.

        ``candidate``: the process would be signalled if not exempt (a refusal, not a mere
        note, when this user may not even look at it)."""
        reason = self.protected.get(info.pid)
        kind = "protected" if reason else None
        if reason is None and info.pid in self.backend.hidden_pids():
            reason, kind = "not visible in this PID namespace", "not_visible"
        if reason is None:
            ns = proc_table.pid_namespace(info.pid)
            if ns is not None and self.namespace is not None and ns != self.namespace:
                reason = (f"in another PID namespace ({ns}: a container); tear it down inside that container "
                          "(pct exec <vmid>), never from outside")
                kind = "outside_namespace"
            elif ns is None and not self.mine(info) and self._user_allowed(info):
                if candidate:
                    self._refuse(info, "not_permitted",
                                 f"{info.user}'s process may not be inspected or signalled by "
                                 f"{proc_table.user_name(self.uid)} (its PID namespace cannot be read)",
                                 run_as_fix(info.user))
                    return True
                reason, kind = f"another user's process ({info.user}) this user may not inspect", "not_permitted"
        if reason is None and self.display_server(info):
            reason, kind = DISPLAY_REASON, "display_server"
        if reason is None:
            name = never_kill_match(info, self.never_kill)
            if name:
                reason, kind = f"on gpu_never_kill ({name})", "never_kill"
        if reason is None and is_controller(info):
            reason, kind = "an Ansible program", "protected"
        if reason is None and ansible_job(info, self.table_now):
            reason, kind = "part of an Ansible run (another job's module or teardown?): never signalled", "protected"
        if reason is None:
            return False
        self._skip(info, step, reason, kind)
        return True

    def read_gpus(self) -> list:
        """The backend's GPUs, remembering which processes it lists as graphics processes."""
        gpus = self.backend.read_gpus()
        self.graphics_pids |= {p["pid"] for g in gpus for p in g["processes"] if p.get("type") == "graphics"}
        return gpus

    def display_server(self, info) -> bool:
        """A graphics process (as the driver lists it), an X server, Xwayland or a Wayland compositor."""
        return info.pid in self.graphics_pids or never_kill_match(info, list(DISPLAY_SERVERS)) is not None

    def _user_allowed(self, info) -> bool:
        return self.scope == "node" or self.kill_other_users or self.mine(info)

    def _refuse(self, info, kind: str, reason: str, fix: str, gpus=None):
        entry = self.refused.setdefault(info.pid, {**info.as_dict(), "starttime": info.starttime, "kind": kind,
                                                   "reason": reason, "fix": fix, "gpus": []})
        for index in gpus or []:
            if index not in entry["gpus"]:
                entry["gpus"].append(index)
        self.skipped.pop(info.pid, None)

    def _gpu_nodes(self, gpus) -> dict[int, str | None]:
        nodes = {}
        for gpu in gpus:
            node = gpu.get("node")
            nodes[gpu["index"]] = os.path.realpath(node) if node else None
        return nodes

    def memory_holders(self, table, gpus) -> tuple[list, set[int]]:
        """(b): compute processes on the target GPUs that hold the GPU's node here; and the target
        GPUs with memory no listed visible process explains (for (c))."""
        nodes = self._gpu_nodes(gpus)
        all_gpu_nodes = {n for n in proc_table.expand_nodes(self.device_glob) if GPU_NODE.match(os.path.basename(n))}
        chosen, unattributed = {}, set()
        hidden = self.backend.hidden_pids()
        for gpu in gpus:
            if gpu["index"] not in self.target_gpus:
                continue
            explained = False
            for proc in gpu["processes"]:
                info = table.get(proc["pid"])
                if info is None or proc["pid"] in hidden or defunct(info):
                    continue
                wanted = {nodes[gpu["index"]]} if nodes[gpu["index"]] else all_gpu_nodes
                holds = proc_table.open_nodes(info.pid, wanted, info.state, info.threads)
                if proc_table.fds_readable(info.pid) and not holds:
                    self._skip(info, "memory", "listed by the driver on a target GPU but holds none of its device "
                                               "nodes here (a host PID that happens to exist here?)")
                    continue
                explained = True
                if self._exempt(info, "memory"):
                    continue
                if not self._user_allowed(info):
                    self._refuse(info, "other_user",
                                 f"another user's process ({info.user}) holds {proc.get('used_memory_mib')} MiB on "
                                 f"target GPU {gpu['index']}; it is never killed by default", OTHER_USER_FIX,
                                 [gpu["index"]])
                    continue
                chosen[info.pid] = info
            used = gpu.get("memory_used_mib")
            if not explained and (used is None or used > self.idle_mib):
                unattributed.add(gpu["index"])
        return [chosen[p] for p in sorted(chosen)], unattributed

    def engine_holders(self, table, gpus, unattributed: set[int]) -> list:
        """(c): on target GPUs whose memory no process explains, holders of the GPU's node that
        match the engine's patterns."""
        nodes = self._gpu_nodes(gpus)
        wanted = {nodes[i] for i in unattributed if nodes.get(i)}
        for index in sorted(unattributed):
            if not nodes.get(index):
                self.warnings.append(
                    f"GPU {index}: memory not attributed to any process and its device node is unknown (no "
                    "/proc/driver/nvidia/gpus entry), so its holders cannot be told apart; nothing killed for it."
                )
        if not wanted:
            return []
        chosen = []
        held = proc_table.holders(sorted(wanted), table)
        for pid in sorted(held):
            info = table[pid]
            if defunct(info) or not self.matches(info):
                continue
            if self._exempt(info, "engine-holder"):
                continue
            if not self._user_allowed(info):
                self._skip(info, "engine-holder", f"matches the engine's patterns but is another user's ({info.user})")
                continue
            chosen.append(info)
        return chosen

    # ---- which GPUs a process uses (gpu_devices holds in both scopes)

    def _uses(self, pid, gpus, nodes, held) -> set[int]:
        """The GPUs pid uses: where the driver lists its memory, else the GPUs whose node it holds."""
        listed = {g["index"] for g in gpus for p in g["processes"] if p["pid"] == pid}
        return listed or {i for i, n in nodes.items() if n and n in held.get(pid, ())} or self._meant(pid, gpus)

    def _meant(self, pid, gpus) -> set[int]:
        """The GPUs a process that holds none yet is meant for: its CUDA_VISIBLE_DEVICES (indexes or
        UUIDs), read from /proc/<pid>/environ (this user's processes, or any as root); else none."""
        value = proc_table.environ_value(pid, "CUDA_VISIBLE_DEVICES")
        if value is None:
            return set()
        items = [v.strip() for v in value.split(",") if v.strip()]
        if not items:
            return {-1}  # CUDA_VISIBLE_DEVICES="" : no GPU at all, so none of the targets
        try:
            return set(gpu_state.resolve_devices(gpus, items))
        except gpu_state.GpuStateError:
            return set()

    def _elsewhere(self, pid, table, gpus, held) -> bool:
        """It (or a child of it) uses GPUs, none of them a target: never signalled."""
        if set(self.target_gpus) >= {g["index"] for g in gpus}:
            return False
        nodes = self._gpu_nodes(gpus)
        used = set()
        for member in {pid} | proc_table.descendants(pid, table):
            used |= self._uses(member, gpus, nodes, held)
        return bool(used) and not used & set(self.target_gpus)

    def _shared_only(self, pid, table, gpus, held) -> bool:
        """It (with its children) holds only the shared nodes (nvidiactl, nvidia-uvm, ...), no GPU's
        node and no listed memory: a CUDA job still starting (no GPU chosen yet) or a monitor."""
        gpu_nodes = {n for n in self._gpu_nodes(gpus).values() if n}
        for member in {pid} | proc_table.descendants(pid, table):
            if any(p["pid"] == member for g in gpus for p in g["processes"]):
                return False
            if set(held.get(member, ())) & gpu_nodes:
                return False
        return bool(gpu_nodes)

    def _mapping_unknown(self, gpus) -> bool:
        """Some GPU's device node is unknown while only some GPUs are targets: nodes say nothing."""
        subset = not set(self.target_gpus) >= {g["index"] for g in gpus}
        unknown = [g["index"] for g in gpus if not g.get("node")]
        if subset and unknown and not self.mapping_warned:
            self.mapping_warned = True
            self.warnings.append(
                f"cannot map the device nodes to GPUs (GPU {', '.join(map(str, unknown))}: no "
                "/proc/driver/nvidia/gpus entry, and the driver gives no minor number): with gpu_devices naming "
                "some GPUs only, nothing is killed by its device nodes; processes are found by their memory and "
                "the engine's patterns only.")
        return subset and bool(unknown)

    def pattern_matches(self, table, gpus) -> list:
        """Scope node: every process matching the engine's patterns, unless it and its children use
        only GPUs outside gpu_devices."""
        held = proc_table.holders(proc_table.expand_nodes(self.device_glob), table)
        chosen = []
        for info in table.values():
            if defunct(info) or not self.matches(info):
                continue
            if self._elsewhere(info.pid, table, gpus, held):
                self._skip(info, "pattern", ELSEWHERE)
                continue
            if not self._exempt(info, "pattern"):
                chosen.append(info)
        return chosen

    def device_holders(self, table, gpus) -> list:
        """Scope node: holders of a target GPU's node, and of the shared nodes (nvidiactl, nvidia-uvm,
        ...), unless they (with their children) use only other GPUs: by the driver's memory list
        where it has one, else by the nodes. With nodes that cannot be mapped to GPUs, none."""
        held = proc_table.holders(proc_table.expand_nodes(self.device_glob), table)
        unknown = self._mapping_unknown(gpus)
        chosen = []
        for pid in sorted(held):
            if unknown:
                self._skip(table[pid], "holder", "not killed by its device nodes: they cannot be mapped to GPUs "
                                                 "here (see the warning): left running")
                continue
            if self._elsewhere(pid, table, gpus, held):
                self._skip(table[pid], "holder", ELSEWHERE)
                continue
            if self._shared_only(pid, table, gpus, held):
                self._skip(table[pid], "holder", SHARED_ONLY)
                continue
            if not self._exempt(table[pid], "holder"):
                chosen.append(table[pid])
        return chosen

    def report_monitors(self, table, gpus):
        """Holders of the nodes that nothing selected: left running, and said so with what they hold."""
        nodes = self._gpu_nodes(gpus)
        unattributed = {i: g["memory_used_mib"] for i, g in ((g["index"], g) for g in gpus)
                        if not g["processes"] and gpu_state.is_dirty(g, self.idle_mib)}
        for pid, held in sorted(proc_table.holders(proc_table.expand_nodes(self.device_glob), table).items()):
            info = table[pid]
            if pid in self.targets or pid in self.refused or pid in self.skipped or defunct(info):
                continue
            if self._exempt(info, "holder", candidate=False):
                continue
            listed = {g["index"]: p.get("used_memory_mib") for g in gpus for p in g["processes"] if p["pid"] == pid}
            maybe = sorted(i for i in unattributed if nodes.get(i) in held)
            if listed and not set(listed) & set(self.target_gpus):
                self._skip(info, "holder", "holds memory only on GPUs outside gpu_devices: left running")
            elif listed:
                mib = ", ".join(f"{m} MiB on GPU {i}" for i, m in sorted(listed.items()))
                self._skip(info, "holder", f"holds {mib}: left running")
            elif maybe:
                self._skip(info, "holder", "holds the node of GPU " + ", ".join(
                    f"{i}, whose {unattributed[i]} MiB the driver attributes to no process (it may hold them)"
                    for i in maybe) + ": left running")
            else:
                self._skip(info, "holder", MONITOR)

    def report_patterns(self, table):
        """Processes matching the engine's patterns that scope own leaves: said so."""
        for info in table.values():
            if info.pid in self.targets or info.pid in self.refused or info.pid in self.skipped:
                continue
            if defunct(info) or not self.matches(info) or self._exempt(info, "pattern", candidate=False):
                continue
            whose = "this user's" if self.mine(info) else f"another user's ({info.user})"
            self._skip(info, "pattern", f"matches the engine's patterns ({whose}) but is not in the recorded tree "
                                        "and holds no memory on a target GPU: left running (gpu_kill_scope: node "
                                        "would kill it)")

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
# What the engines' processes are (fields: see proc_table.identity). Data, also in the role's
# defaults (gpu_engine_kill_patterns), where the emulator's are scoped to its device folder.
ENGINE_KILL_PATTERNS = {
    "sglang": [
        {"title": "^sglang::"},
        {"module": r"^sglang\.launch_server$"},
        {"script": "(^|/)sglang$", "subcommand": "^serve$"},
    ],
    "vllm": [
        {"title": "^VLLM::"},
        {"module": r"^vllm\.entrypoints\."},
        {"script": "(^|/)vllm$", "subcommand": "^serve$"},
    ],
}
DEFAULT_KILL_PATTERNS = ENGINE_KILL_PATTERNS["sglang"]
IDENTITY_FIELDS = ("title", "comm", "program", "module", "script")
QUALIFIER_FIELDS = ("subcommand", "args")
SCOPES = ("own", "node")
SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGKILL: "SIGKILL"}
CONTROLLER_PREFIXES = ("ansible", "ansible-playbook", "ansible-runner", "ansible-pull", "awx")
GPU_NODE = re.compile(r"^nvidia[0-9]+$")

D_STATE_ADVICE = (
    "stuck in the driver (state D): no signal can reach it until it leaves the driver; only a "
    "GPU reset (nvidia-smi --gpu-reset -i <gpu>, with no other process on that GPU) or a reboot "
    "of the node frees it"
)
OUTSIDE_ADVICE = (
    "held outside this PID namespace (by the Proxmox host or another container): it cannot be "
    "freed from here; tear down the container that holds it from inside it (pct exec <vmid> -- ..., "
    "the inventory's proxmox_pct_remote connection), or stop the host's process on the host"
)
UNATTRIBUTED_ADVICE = (
    "the driver attributes it to no process here (NVIDIA drivers before 565 in a container report "
    "no per-process memory); the visible holders of its node are listed"
)
OTHER_USER_FIX = (
    "stop it as its owner, or set gpu_kill_other_users: true to let the teardown kill it (the "
    "teardown must then run as root, become: true)"
)
MONITOR = "holding a device node, no memory: left running"


class TeardownInputError(ValueError):
    """A bad setting: the message names it and says how to fix it."""


# --------------------------------------------------------------------------- settings


class Pattern:
    """One kill pattern: regular expressions on what a process is (proc_table.identity).

    A string searches the title, kernel name, program, module and script; a mapping names the
    fields (title, comm, program, module, script; qualifiers subcommand and args, the latter
    searched in the whole command line) and every field given must match. A qualifier alone
    is refused: an argument never makes a process what it is.
    """

    def __init__(self, index: int, spec):
        self.spec = spec
        where = f"gpu_kill_patterns[{index}]"
        if isinstance(spec, str):
            fields = {"any": spec}
        elif isinstance(spec, dict):
            fields = dict(spec)
            unknown = sorted(set(fields) - set(IDENTITY_FIELDS) - set(QUALIFIER_FIELDS))
            if unknown:
                raise TeardownInputError(
                    f"{where} {spec!r} has unknown field(s) {', '.join(map(str, unknown))}: use "
                    f"{', '.join(IDENTITY_FIELDS)} (what the process is) and optionally subcommand or args."
                )
            if not any(f in fields for f in IDENTITY_FIELDS):
                raise TeardownInputError(
                    f"{where} {spec!r} names no field of what the process is: give title, comm, program, module "
                    "or script (subcommand and args only narrow a match), e.g. {title: '^sglang::'}."
                )
        else:
            raise TeardownInputError(
                f"{where} is {spec!r}: each pattern is a regular expression (matched against the process title, "
                "name, program, module and script) or a mapping such as {module: '^sglang\\.launch_server$'}."
            )
        self.fields = {}
        for name, value in fields.items():
            label = where if name == "any" else f"{where}.{name}"
            if not isinstance(value, str) or not value.strip():
                raise TeardownInputError(f"{label} is {value!r}: it must be a non-empty regular expression.")
            try:
                rx = re.compile(value)
            except re.error as exc:
                raise TeardownInputError(
                    f"{label} {value!r} is not a valid regular expression ({exc}): escape special characters "
                    "with a backslash, e.g. 'sglang\\.launch_server'."
                ) from exc
            if rx.search("") is not None:
                raise TeardownInputError(
                    f"{label} {value!r} matches an empty string, so it would match every process: use a pattern "
                    "that names the server, e.g. '^sglang::'."
                )
            self.fields[name] = rx

    def matches(self, ident: dict, command: str) -> bool:
        for name, rx in self.fields.items():
            if name == "any":
                if not any(ident.get(f) and rx.search(ident[f]) for f in IDENTITY_FIELDS):
                    return False
            elif name == "args":
                if not rx.search(command):
                    return False
            elif name == "title":
                # the title set by setproctitle shows in argv[0] and, cut to 15 characters, in comm
                if not (rx.search(ident["title"] or "") or rx.search(ident["comm"] or "")):
                    return False
            elif not (ident.get(name) and rx.search(ident[name])):
                return False
        return True


def compile_patterns(patterns) -> list[Pattern]:
    if not isinstance(patterns, list):
        raise TeardownInputError(
            "gpu_kill_patterns must be a list of patterns, e.g. [{title: '^sglang::'}, "
            "{module: '^sglang\\.launch_server$'}]."
        )
    return [Pattern(i, spec) for i, spec in enumerate(patterns)]


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


def check_scope(scope) -> str:
    if scope not in SCOPES:
        raise TeardownInputError(
            f"gpu_kill_scope is {scope!r}: use 'own' (the default: only what this project launched and what "
            "holds memory on the target GPUs, of this user) or 'node' (a dedicated node: everything matching "
            "the engine's patterns and every holder of the target GPUs' nodes, except gpu_never_kill)."
        )
    return scope


def _int_field(record: dict, key: str, source: str):
    value = record.get(key)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise TeardownInputError(
            f"the server record's {key} is {value!r} ({source}): it must be an integer; delete the record "
            "or relaunch the server."
        ) from exc


def recorded_server(record, server_pgid, state_file: str | None, warnings: list[str]) -> tuple[dict, str]:
    """The launched server's pid, pgid, sid and starttime (each may be None), and their source.

    From ``record`` (the specbench_server fact) when it names a pid or pgid, else
    ``server_pgid``, else the launch role's state file.
    """
    empty = {"pid": None, "pgid": None, "sid": None, "starttime": None}
    source = "none recorded"
    data = None
    if isinstance(record, dict) and any(record.get(k) not in (None, "") for k in ("pid", "pgid")):
        data, source = record, "specbench_server"
    elif server_pgid not in (None, ""):
        try:
            pgid = int(server_pgid)
        except (TypeError, ValueError) as exc:
            raise TeardownInputError(
                f"server_pgid {server_pgid!r} is not a process group id: pass specbench_server.pgid (an integer)."
            ) from exc
        data, source = {"pgid": pgid}, "specbench_server.pgid"
    elif state_file and os.path.exists(state_file):
        try:
            with open(state_file, encoding="utf-8") as fh:
                data = json.load(fh)
            if not isinstance(data, dict) or data.get("pgid") in (None, ""):
                raise KeyError("pgid")
            int(data["pgid"])
        except (OSError, ValueError, TypeError, KeyError) as exc:
            warnings.append(
                f"{state_file} has no readable pgid ({exc.__class__.__name__}: {exc}); the recorded-tree "
                "step is skipped (the GPU memory step still runs). Delete or fix the file."
            )
            return empty, state_file
        source = state_file
    if data is None:
        return empty, source
    server = {key: _int_field(data, key, source) for key in empty}
    for key in ("pid", "pgid", "sid"):
        if server[key] is not None and server[key] <= 1:
            warnings.append(f"recorded {key} {server[key]} (from {source}) is not a server's; ignored.")
            server[key] = None
    return server, source


def recorded_pgid(server_pgid, state_file: str | None, warnings: list[str]) -> tuple[int | None, str]:
    """The recorded process group alone (kept for callers of the first version)."""
    server, source = recorded_server(None, server_pgid, state_file, warnings)
    return server["pgid"], source


# --------------------------------------------------------------------------- who is off limits


def is_controller(info: proc_table.ProcInfo) -> bool:
    """An Ansible/AWX program (argv[0], or argv[1] behind an interpreter)."""
    for arg in info.cmdline[:2]:
        base = os.path.basename(arg)
        if base.startswith(CONTROLLER_PREFIXES):
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


# --------------------------------------------------------------------------- the sequence


class Teardown:
    """One teardown run. ``clock``/``sleep`` are injectable for the benchmark."""

    def __init__(self, backend, device_glob, *, idle_mib=64, never_kill=None, kill_patterns=None,
                 server_pgid=None, server_state_file=None, server_record=None, kill_scope="own",
                 kill_other_users=False, devices=None, term_timeout_s=15.0, kill_timeout_s=10.0,
                 clean_timeout_s=60.0, poll_interval_s=0.05, check_mode=False, clock=time.monotonic,
                 sleep=time.sleep):
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
        if self.poll_interval > self.clean_timeout:
            raise TeardownInputError(
                f"gpu_poll_interval_s {poll_interval_s} is longer than gpu_clean_timeout_s {clean_timeout_s}: "
                "poll more often than the deadline (the default is 0.05 s)."
            )
        self.server, self.server_source = recorded_server(server_record, server_pgid, server_state_file,
                                                          self.warnings)
        self.pgid = self.server["pgid"]
        self.pgid_source = self.server_source
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

    # ---- what a process is, and whose

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
        return table

    def _skip(self, info, step, reason):
        if info.pid not in self.targets and info.pid not in self.refused:
            self.skipped.setdefault(info.pid, {**info.as_dict(), "reason": reason, "step": step})

    def _exempt(self, info, step: str, candidate: bool = True) -> bool:
        """Off limits whatever the scope (records why); False when it may be considered.

        ``candidate``: the process would be signalled if not exempt (a refusal, not a mere
        note, when this user may not even look at it)."""
        reason = self.protected.get(info.pid)
        if reason is None and info.pid in self.backend.hidden_pids():
            reason = "not visible in this PID namespace"
        if reason is None:
            ns = proc_table.pid_namespace(info.pid)
            if ns is not None and self.namespace is not None and ns != self.namespace:
                reason = (f"in another PID namespace ({ns}: a container); tear it down inside that container "
                          "(pct exec <vmid>), never from outside")
            elif ns is None and not self.mine(info) and self._user_allowed(info):
                if candidate:
                    self._refuse(info, "not_permitted",
                                 f"{info.user}'s process may not be inspected or signalled by "
                                 f"{proc_table.user_name(self.uid)} (its PID namespace cannot be read)",
                                 f"run the teardown as root (become: true) or as {info.user}")
                    return True
                reason = f"another user's process ({info.user}) this user may not inspect"
        if reason is None:
            name = never_kill_match(info, self.never_kill)
            if name:
                reason = f"on gpu_never_kill ({name})"
        if reason is None and is_controller(info):
            reason = "an Ansible program"
        if reason is None:
            return False
        self._skip(info, step, reason)
        return True

    def _user_allowed(self, info) -> bool:
        return self.scope == "node" or self.kill_other_users or self.mine(info)

    def _refuse(self, info, kind: str, reason: str, fix: str, gpus=None):
        entry = self.refused.setdefault(info.pid, {**info.as_dict(), "kind": kind, "reason": reason, "fix": fix,
                                                   "gpus": []})
        for index in gpus or []:
            if index not in entry["gpus"]:
                entry["gpus"].append(index)
        self.skipped.pop(info.pid, None)

    # ---- selection

    def launched_tree(self, table) -> list:
        """(a): the recorded server's descendants, group and session, if the record is not stale."""
        server = self.server
        pid, start = server["pid"], server["starttime"]
        leader = table.get(pid) if pid else None
        genuine = leader is not None and start is not None and leader.starttime == start
        if pid and start is not None and leader is not None and not genuine:
            self.warnings.append(
                f"the recorded server pid {pid} ({self.server_source}) now belongs to another process (its start "
                "time differs): a stale record; its group and session are left alone."
            )
            return []
        members = set()
        if genuine:
            members.add(pid)
            members |= proc_table.descendants(pid, table)
        groups = {("pgid", server["pgid"]), ("sid", server["sid"])}
        for field, value in groups:
            if value is None:
                continue
            if value != pid and value in table and start is not None:
                # a pid still in use as a group or session id is never reused: a live process with
                # that pid and another group is not the server's
                holder = table[value]
                if getattr(holder, field) != value:
                    continue
            members |= {p for p, i in table.items() if getattr(i, field) == value}
        infos = [table[p] for p in sorted(members) if not defunct(table[p])]
        if infos and not genuine and start is None:
            # an old record without a start time: only a group that still looks like the server
            nodes = set(proc_table.expand_nodes(self.device_glob))
            if not any(self.matches(i) or proc_table.open_nodes(i.pid, nodes, i.state, i.threads) for i in infos):
                self.warnings.append(
                    f"recorded process group {self.pgid} ({self.server_source}) no longer looks like the server: "
                    "no member matches gpu_kill_patterns or holds a device node (a stale record whose group id "
                    "was reused?); it is left alone."
                )
                return []
        chosen = []
        for info in infos:
            if self._exempt(info, "launched"):
                continue
            if not self._user_allowed(info):
                self._skip(info, "launched", f"in the recorded tree but another user's ({info.user})")
                continue
            chosen.append(info)
        return chosen

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

    def pattern_matches(self, table) -> list:
        """Scope node: every process matching the engine's patterns."""
        chosen = []
        for info in table.values():
            if defunct(info) or not self.matches(info):
                continue
            if not self._exempt(info, "pattern"):
                chosen.append(info)
        return chosen

    def device_holders(self, table, gpus) -> list:
        """Scope node: holders of a target GPU's node, and of the shared nodes (nvidiactl, nvidia-uvm,
        ...) unless they hold only non-target GPUs' nodes."""
        nodes = self._gpu_nodes(gpus)
        target_nodes = {nodes[i] for i in self.target_gpus if nodes.get(i)}
        other_nodes = {n for i, n in nodes.items() if n and i not in self.target_gpus}
        chosen = []
        for pid, held_nodes in sorted(proc_table.holders(proc_table.expand_nodes(self.device_glob), table).items()):
            held = set(held_nodes)
            if not held & target_nodes and held & other_nodes:
                self._skip(table[pid], "holder", "holds only GPUs outside gpu_devices: left running")
                continue
            if not self._exempt(table[pid], "holder"):
                chosen.append(table[pid])
        return chosen

    def report_monitors(self, table, gpus):
        """Holders of the nodes that nothing selected: left running, and said so."""
        elsewhere = {p["pid"] for g in gpus if g["index"] not in self.target_gpus for p in g["processes"]}
        for pid in sorted(proc_table.holders(proc_table.expand_nodes(self.device_glob), table)):
            info = table[pid]
            if pid in self.targets or pid in self.refused or pid in self.skipped or defunct(info):
                continue
            if self._exempt(info, "holder", candidate=False):
                continue
            if pid in elsewhere:
                self._skip(info, "holder", "holds memory only on GPUs outside gpu_devices: left running")
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

    # ---- signalling

    def _add(self, infos, step):
        added = []
        for info in infos:
            if info.pid in self.refused:
                continue
            if info.pid not in self.targets:
                self.targets[info.pid] = {"info": info, "step": step, "signals": []}
                self.skipped.pop(info.pid, None)
            added.append(info.pid)
        return added

    def _alive(self, pid) -> bool:
        return pid not in self.refused and not self.targets[pid]["info"].gone()

    def _signal(self, pids, sig):
        for pid in pids:
            t = self.targets[pid]
            if not self._alive(pid):
                continue
            name = SIGNAL_NAMES[sig]
            if self.backend.deliverable(pid):
                outcome = proc_table.send_signal(pid, t["info"].starttime, sig)
                if outcome == proc_table.GONE:
                    continue
                if outcome == proc_table.NOT_PERMITTED:
                    info = t["info"]
                    self._refuse(info, "not_permitted",
                                 f"the kernel refused {name} to this process of {info.user} (the teardown runs as "
                                 f"{proc_table.user_name(self.uid)})",
                                 f"run the teardown as root (become: true) or as {info.user}")
                    self.log.append(f"{name} pid {pid} ({t['step']}): not permitted")
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

    def _select(self, table, gpus) -> list:
        """Steps 2 and 3: (b) and (c) for scope own; the pattern matches for scope node."""
        if self.scope == "node":
            return self.pattern_matches(table)
        memory, unattributed = self.memory_holders(table, gpus)
        return memory + [i for i in self.engine_holders(table, gpus, unattributed) if i.pid not in
                         {m.pid for m in memory}]

    def run(self) -> dict:
        started = self.clock()
        backend = self.backend
        table = self._refresh()
        gpus = backend.read_gpus()
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

        # 2. its survivors, and the memory holders (scope node: the patterns): TERM, wait, KILL
        table = self._refresh()
        gpus = backend.read_gpus()
        step2 = [p for p in self.targets if self._alive(p)]
        found = self._select(table, gpus)
        step = "pattern" if self.scope == "node" else "memory"
        for pid in self._add(found, step):
            if pid not in step2:
                step2.append(pid)
        if step2:
            self._escalate(step2)

        # 3. a fresh look (scope node: every holder of the target GPUs' nodes, the fuser step)
        table = self._refresh()
        gpus = backend.read_gpus()
        if self.scope == "node":
            again, step = self.device_holders(table, gpus), "holder"
        else:
            again, step = self._select(table, gpus), "memory"
        fresh = [p for p in self._add(again, step) if self._alive(p)]
        if fresh:
            self._escalate(fresh)
        kills_done = self.clock()

        # 4. poll every target GPU until clean
        clean_at = self.wait_clean(kills_done + self.clean_timeout)

        table = proc_table.snapshot()
        after = gpu_state.read_state(backend, self.device_glob, self.idle_mib, table, self.devices)
        self.report_monitors(table, after["gpus"])
        if self.scope == "own":
            self.report_patterns(table)
        result = self._result(before, after, started)
        result["time_to_clean_s"] = round(clean_at - kills_done, 4) if clean_at is not None else None
        result["clean"] = clean_at is not None and after["clean"]
        if not result["clean"]:
            result["msg"] = self.failure(after, table)
            result["problems"] = self.problems
        else:
            result["msg"] = self._summary(result)
        return result

    def _blocked(self, gpus) -> bool:
        """Every dirty target GPU holds memory of a live process this teardown refused: no point waiting."""
        dirty = [g for g in gpus if g["index"] in self.target_gpus and gpu_state.is_dirty(g, self.idle_mib)]
        if not dirty:
            return False
        for gpu in dirty:
            pids = {p["pid"] for p in gpu["processes"]}
            if not any(pid in pids and proc_table.alive(pid, r.get("starttime")) for pid, r in self.refused.items()):
                return False
        return True

    def wait_clean(self, deadline: float) -> float | None:
        """Read every target GPU each poll interval until all are clean; the clock then, or None."""
        targets = self.target_gpus
        while True:
            gpus = self.backend.read_gpus()
            if not targets and not self.devices:
                targets = [g["index"] for g in gpus]
            if not any(gpu_state.is_dirty(g, self.idle_mib) for g in gpus if g["index"] in targets):
                return self.clock()
            if self.clock() >= deadline or (self.refused and self._blocked(gpus)):
                return None
            self.sleep(self.poll_interval)

    def _dry_run(self, table, gpus, before, started) -> dict:
        plan = []
        steps = [("launched", self.launched_tree(table))]
        if self.scope == "node":
            steps += [("pattern", self.pattern_matches(table)), ("holder", self.device_holders(table, gpus))]
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
            would_kill=plan,
            clean=before["clean"] and not self.refused,
            time_to_clean_s=None,
            msg=f"check mode: would signal {len(plan)} process(es); killed nothing"
            + (f"; would refuse {len(self.refused)}: " + "; ".join(self._refusal_lines()) if self.refused else ""),
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
            "scope": self.scope,
            "targets": self.target_gpus,
            "before": before,
            "after": after,
            "killed": killed,
            "would_kill": [],
            "refused": sorted(self.refused.values(), key=lambda r: r["pid"]),
            "problems": self.problems,
            "left_alone": sorted((s for p, s in self.skipped.items() if p not in self.refused),
                                 key=lambda s: s["pid"]),
            "recorded_pgid": self.pgid,
            "recorded_pgid_source": self.pgid_source,
            "recorded_server": self.server,
            "log": self.log,
            "warnings": self.warnings,
            "elapsed_s": round(self.clock() - started, 4),
        }

    def _summary(self, result) -> str:
        gpus = len(result["targets"])
        if not result["killed"]:
            text = f"{gpus} target GPU(s) clean; nothing to kill"
        else:
            names = ", ".join(f"{k['pid']} ({k['signal']})" for k in result["killed"])
            text = f"{gpus} target GPU(s) clean {result['time_to_clean_s']}s after the last holder exited; killed {names}"
        monitors = [s["pid"] for s in result["left_alone"] if s["reason"] == MONITOR]
        if monitors:
            text += f"; {len(monitors)} process(es) {MONITOR} ({', '.join(map(str, monitors))})"
        return text

    # ---- the failure text

    def _refusal_lines(self) -> list[str]:
        lines = []
        for r in sorted(self.refused.values(), key=lambda r: r["pid"]):
            lines.append(f"pid {r['pid']} (user {r['user']}): {r['reason']}: {r['cmdline'][:300]}. Fix: {r['fix']}.")
        return lines

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
        return f"pid {pid} (user {info.user}) {text}{extra}: {info.command[:300]}"

    def _kind(self, pid, table) -> str:
        info = table.get(pid)
        if info is None:
            return "not_visible"
        if pid in self.refused:
            return self.refused[pid]["kind"]
        state = self.backend.state_of(pid) or info.state
        return {"D": "d_state", "Z": "zombie"}.get(state, "alive")

    def _problem(self, kind, text, **fields) -> None:
        self.problems.append({"kind": kind, **fields, "message": text})

    def failure(self, after, table) -> str:
        """The failure text; each fact in it is also in self.problems, one structured entry each."""
        self.problems = []
        lines = [
            f"Target GPUs not clean after {self.clean_timeout:g}s (threshold {self.idle_mib} MiB, backend "
            f"{self.backend.name}, scope {self.scope}); do not benchmark on them."
        ]
        if self.refused:
            lines.append("Refused:")
            lines += [f"  {line}" for line in self._refusal_lines()]
        hidden = self.backend.hidden_pids()
        nodes = self._gpu_nodes(after["gpus"])
        holders = {h["pid"]: h for h in after["holders"]}
        for gpu in after["gpus"]:
            if gpu["index"] not in after["targets"] or not gpu_state.is_dirty(gpu, self.idle_mib):
                continue
            index = gpu["index"]
            used = gpu["memory_used_mib"]
            visible = [p for p in gpu["processes"] if p["pid"] in table and p["pid"] not in hidden]
            count = len(gpu["processes"])
            lines.append(f"GPU {index} ({gpu['uuid']}): {used} MiB used, {count} compute process(es).")
            for proc in gpu["processes"]:
                why = (self.refused.get(proc["pid"]) or self.skipped.get(proc["pid"]) or {}).get("reason", "")
                text = self.describe(proc["pid"], table, why)
                lines.append(f"  {text}")
                self._problem(self._kind(proc["pid"], table), text, gpu=index, pid=proc["pid"],
                              mib=proc.get("used_memory_mib"))
            attributed = sum(p["used_memory_mib"] or 0 for p in visible)
            node_holders = [pid for pid, h in holders.items() if nodes.get(index) in h["nodes"]]
            unexplained = (used or 0) - attributed
            if not visible and (used or 0) > self.idle_mib:
                if node_holders:
                    lines.append(f"  {used} MiB used: {UNATTRIBUTED_ADVICE}:")
                    for pid in node_holders:
                        why = (self.refused.get(pid) or self.skipped.get(pid) or {}).get("reason", "")
                        lines.append(f"    {self.describe(pid, table, why)}")
                    self._problem("unattributed", f"GPU {index}: {used} MiB used: {UNATTRIBUTED_ADVICE}", gpu=index,
                                  mib=used, holders=node_holders)
                else:
                    lines.append(f"  {used} MiB with no process visible here: {OUTSIDE_ADVICE}.")
                    self._problem("outside_namespace", f"GPU {index}: {used} MiB with no process visible here: "
                                  f"{OUTSIDE_ADVICE}", gpu=index, mib=used)
            elif (all(p["used_memory_mib"] is not None for p in visible) and unexplained > self.idle_mib
                  and not node_holders):
                lines.append(f"  {unexplained} MiB not attributable to a visible process: {OUTSIDE_ADVICE}.")
                self._problem("outside_namespace", f"GPU {index}: {unexplained} MiB not attributable to a visible "
                              f"process: {OUTSIDE_ADVICE}", gpu=index, mib=unexplained)
        survivors = sorted(p for p, t in self.targets.items() if self._alive(p))
        listed = {p["pid"] for g in after["gpus"] for p in g["processes"]}
        for pid in survivors:
            if pid in listed:
                continue
            text = self.describe(pid, table)
            lines.append(f"Still alive after SIGKILL: {text}")
            self._problem(self._kind(pid, table), text, pid=pid)
        for pid, entry in sorted(self.refused.items()):
            if not any(p.get("pid") == pid for p in self.problems):
                self._problem(entry["kind"], f"pid {pid} (user {entry['user']}): {entry['reason']}. Fix: {entry['fix']}.",
                              pid=pid)
        return "\n".join(lines)

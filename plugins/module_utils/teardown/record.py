# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The recorded trees: what the launch roles recorded of their servers (one record per launch,
state/servers/<port>.json; an older single state/server.json; or the specbench_server fact), and
the processes that are still, verifiably, each server's.

A member is verified before any signal: the recorded leader itself (pid and start time), a
descendant of a verified member (same snapshot), or a member of the recorded group or session
that started after the server and, unless the leader still lives (a live group's id cannot be
reused), is the engine by its patterns. A record from an earlier boot (another boot id, or a
start time later than the time since this boot) names nothing here. Once no member is left its record file
is retired: rewritten with ``torn_down`` (when, why), so a later run (or boot) reads that it names
nothing, and the launch's record stays on disk for whoever inspects the run.
"""
from __future__ import annotations

import errno
import json
import os
import stat
import time

from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state, proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown.holders import defunct
from ansible_collections.specbench.core.plugins.module_utils.teardown.settings import TeardownInputError


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


def read_record_file(path: str) -> tuple[dict | None, str | None]:
    """(the record, None), or (None, why it is not trusted or not readable).

    Opened without following a symbolic link and without blocking (a FIFO in its place never
    hangs the teardown), and trusted only as a regular file owned by the user the teardown runs
    as: a record another user could write would let them aim the teardown at any process."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, "a symbolic link, never followed"
        return None, f"unreadable ({exc.strerror})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file"
        if info.st_uid != os.geteuid():
            return None, (f"owned by {proc_table.user_name(info.st_uid)}, not by {proc_table.user_name(os.geteuid())} "
                          "who runs the teardown")
        with os.fdopen(fd, "rb") as fh:
            fd = None
            raw = fh.read(1 << 20)
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    finally:
        if fd is not None:
            os.close(fd)
    try:
        data = json.loads(raw.decode("utf-8", "replace"))
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    return (data, None) if isinstance(data, dict) else (None, "not a JSON object")


def recorded_server(record, server_pgid, state_file: str | None, warnings: list[str]) -> tuple[dict, str]:
    """The launched server's pid, pgid, sid and starttime (each may be None), and their source.

    From ``record`` (the specbench_server fact) when it names a pid or pgid, else
    ``server_pgid``, else the launch role's state file.
    """
    empty = {"pid": None, "pgid": None, "sid": None, "starttime": None, "boot_id": None, "gpus": None}
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
    elif state_file and os.path.lexists(state_file):
        data, why = read_record_file(state_file)
        if data is None:
            if why and not why.startswith("not JSON"):
                warnings.append(f"the server record {state_file} is not trusted: {why}. Nothing is signalled for it "
                                f"and it is left as it is; remove it (rm {state_file}) if it is not yours.")
                return empty, f"{state_file} (untrusted: {why})"
            warnings.append(
                f"{state_file} has no readable pgid ({why}); the recorded-tree step is skipped (the GPU memory "
                "step still runs). Delete or fix the file.")
            return empty, state_file
        try:
            if data.get("pgid") in (None, ""):
                raise KeyError("pgid")
            int(data["pgid"])
        except (ValueError, TypeError, KeyError) as exc:
            warnings.append(
                f"{state_file} has no readable pgid ({exc.__class__.__name__}: {exc}); the recorded-tree step is "
                "skipped (the GPU memory step still runs). Delete or fix the file."
            )
            return empty, state_file
        source = state_file
        if data.get("torn_down"):
            return empty, f"{state_file} (retired: torn down at {data['torn_down'].get('at')})"
    if data is None:
        return empty, source
    server = {key: _int_field(data, key, source) for key in empty if key not in ("boot_id", "gpus")}
    server["boot_id"] = str(data["boot_id"]) if data.get("boot_id") not in (None, "") else None
    gpus = data.get("gpus")
    server["gpus"] = [str(g) for g in gpus] if isinstance(gpus, list) and gpus else None
    for key in ("pid", "pgid", "sid"):
        if server[key] is not None and server[key] <= 1:
            warnings.append(f"recorded {key} {server[key]} (from {source}) is not a server's; ignored.")
            server[key] = None
    return server, source


def recorded_pgid(server_pgid, state_file: str | None, warnings: list[str]) -> tuple[int | None, str]:
    """The recorded process group alone (kept for callers of the first version)."""
    server, source = recorded_server(None, server_pgid, state_file, warnings)
    return server["pgid"], source


def void_reason(server: dict) -> str | None:
    """Why the record cannot name a process of this boot, or None."""
    now = proc_table.boot_id()
    if server.get("boot_id") and now and server["boot_id"] != now:
        return f"recorded on an earlier boot (boot id {server['boot_id']}, now {now})"
    start = server.get("starttime")
    if start is not None and hasattr(time, "CLOCK_BOOTTIME"):
        # starttime counts clock ticks since boot; CLOCK_BOOTTIME is the kernel's own (a syscall,
        # which LXCFS does not rewrite as it does /proc/uptime)
        up = time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK")
        if start > up:
            return f"its start time ({start} ticks after boot) is later than now ({int(up)}): an earlier boot's"
    return None


def retire_state_file(path: str, server: dict, reason: str, warnings: list[str],
                      by: str = "specbench.core.gpu_teardown") -> bool:
    """Mark the state file torn down when it still names ``server`` (pid, pgid and start time as
    read and verified): another launch may have replaced it since, and its record is never
    retired by a teardown that did not verify it."""
    data, why = read_record_file(path)
    if data is None:
        if why and not why.startswith("unreadable (No such"):
            warnings.append(f"the server record {path} was not retired: {why}.")
        return False
    if data.get("torn_down"):
        return False
    keys = [k for k in ("pid", "pgid", "starttime") if server.get(k) is not None]
    if not keys or not all(str(data.get(k)) == str(server[k]) for k in keys) or \
            any(data.get(k) not in (None, "") and server.get(k) is None for k in ("pid", "starttime")):
        warnings.append(f"the server record {path} now names another launch (pid {data.get('pid')}): left as it is "
                        "for that launch's own teardown.")
        return False
    data["torn_down"] = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "reason": reason,
                         "by": by}
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
        return True
    except OSError as exc:
        warnings.append(f"could not retire the server record {path} ({exc}): delete it by hand.")
        return False


class Recorded:
    """One launch record and what this teardown has verified of its tree: the launch role's fact
    (``specbench_server``), a process group given alone, or a record file (``<port>.json`` in the
    node's state/servers, or a single state file). ``paths``: the record files that name this
    launch, retired together once its tree is proven gone."""

    def __init__(self, server: dict, source: str, path: str | None = None):
        self.server, self.source = server, source
        self.paths = [path] if path else []
        self.void: str | None = None  # why the record names nothing of this boot ("" once checked)
        self.stale = False  # the recorded pid belongs to another process now
        self.elsewhere: bool | None = None  # a record of a server outside gpu_devices (None: not checked)
        self.known: dict[int, int] = {}  # verified members seen: pid -> start time
        self.ids: set[tuple[str, int]] = set()  # ("pgid" | "sid", id) of the recorded tree
        self.unverified: set[int] = set()
        self.warned = False

    def same_launch(self, other: dict) -> bool:
        """Whether ``other`` (a record read from a file) names this launch: the same pid and start
        time, or, with no pid recorded on either side, the same process group."""
        mine = self.server
        if mine.get("pid") is not None and other.get("pid") is not None:
            return mine["pid"] == other["pid"] and str(mine.get("starttime")) == str(other.get("starttime"))
        return mine.get("pgid") is not None and mine.get("pgid") == other.get("pgid")

    def as_dict(self) -> dict:
        return {**self.server, "source": self.source, "record_files": list(self.paths)}


def record_files(state_file: str | None, state_dir: str | None) -> list[str]:
    """The record files a teardown reads: the single state file, then every ``*.json`` in the node's
    folder of launch records (one per launch, named by port), by name. Entries are listed, never
    followed; each file is trusted or not when it is read (read_record_file)."""
    files = [state_file] if state_file and os.path.lexists(state_file) else []
    if state_dir and os.path.isdir(state_dir):
        try:
            names = sorted(os.listdir(state_dir))
        except OSError:
            names = []
        files += [os.path.join(state_dir, n) for n in names if n.endswith(".json") and not n.startswith(".")]
    return files


def recorded_servers(record, server_pgid, state_file: str | None, state_dir: str | None,
                     warnings: list[str], named_nothing: list[str] | None = None) -> list[Recorded]:
    """Every launch this teardown is to take down, each once: the fact (or process group) given,
    then each record file that names another launch. A record file naming the fact's launch is
    that launch's own (retired with it); a retired, void of fields or untrusted one names nothing
    (its source, saying why, goes to ``named_nothing``)."""
    found: list[Recorded] = []
    if (isinstance(record, dict) and any(record.get(k) not in (None, "") for k in ("pid", "pgid"))) or \
            server_pgid not in (None, ""):
        server, source = recorded_server(record, server_pgid, None, warnings)
        if any(server[k] is not None for k in ("pid", "pgid")):
            found.append(Recorded(server, source))
    for path in record_files(state_file, state_dir):
        server, source = recorded_server(None, None, path, warnings)
        if all(server[k] is None for k in ("pid", "pgid", "sid")):
            if named_nothing is not None:
                named_nothing.append(source)  # retired, unreadable or untrusted: warned about
            continue
        same = next((r for r in found if r.same_launch(server)), None)
        if same is not None:
            same.paths.append(path)
        else:
            found.append(Recorded(server, source, path))
    return found


class RecordedTree:
    """Step (a) of gpu_teardown.Teardown: the recorded servers' trees, re-walked each round."""

    def _tree_ids(self, rec: Recorded, leader) -> set[tuple[str, int]]:
        """The recorded group and session, and those the live leader leads (a record without sid)."""
        ids = {(f, rec.server[f]) for f in ("pgid", "sid") if rec.server[f] is not None}
        if leader is not None:
            ids |= {(f, getattr(leader, f)) for f in ("pgid", "sid") if getattr(leader, f) == leader.pid}
        rec.ids |= ids
        return set(rec.ids)

    def tree_members(self, table, rec: Recorded) -> list:
        """Every live, verified member of one recorded tree (before exemptions)."""
        server = rec.server
        pid, start = server["pid"], server["starttime"]
        if rec.void is None and (pid or server["pgid"] or server["sid"]):
            rec.void = void_reason(server) or ""
            if rec.void:
                self.warnings.append(f"the server record ({rec.source}) is void: {rec.void}; "
                                     "nothing is signalled for it and it is retired.")
        if rec.void:
            return []
        leader = table.get(pid) if pid else None
        if leader is not None and start is not None and leader.starttime != start:
            if not rec.stale:
                rec.stale = True
                self.warnings.append(
                    f"the recorded server pid {pid} ({rec.source}) now belongs to another process (its "
                    "start time differs): a stale record; that process, its group and session are left alone.")
        if rec.stale and not rec.known:
            return []  # a reused pid: nothing the record names is verifiably the server's
        if not self.record_on_targets(table, rec):
            return []
        genuine = leader is not None and start is not None
        verified = {p for p, st in rec.known.items() if p in table and table[p].starttime == st}
        if genuine:
            verified.add(pid)
        members = set(verified)
        for root in verified:
            members |= proc_table.descendants(root, table)
        listed = None
        for field, value in sorted(self._tree_ids(rec, leader if genuine else None)):
            for other, info in table.items():
                if other in members or getattr(info, field) != value:
                    continue
                if start is not None and info.starttime < start:
                    why = "started before the recorded server"
                elif genuine or self.matches(info):
                    members.add(other)
                    continue
                elif start is None:
                    # holding a device node proves nothing (nvtop in a reused group): GPU memory held by it
                    # or a descendant of it does (a server's workers), as the patterns do
                    listed = {p["pid"] for g in self.read_gpus() for p in g["processes"]} if listed is None else listed
                    if ({other} | proc_table.descendants(other, table)) & listed:
                        members.add(other)
                        continue
                    why = ("an old record without a start time, and neither it nor a child of it holds GPU memory or "
                           "matches gpu_kill_patterns")
                else:
                    why = "the recorded server is gone and it does not match gpu_kill_patterns"
                rec.unverified.add(other)
                self._skip(info, "launched", f"in the recorded process {'group' if field == 'pgid' else 'session'} "
                                             f"{value} but not verifiably the recorded server's ({why}): left alone")
        for member in members:
            rec.known[member] = table[member].starttime
        return [table[p] for p in sorted(members) if not defunct(table[p])]

    def record_on_targets(self, table, rec: Recorded) -> bool:
        """With gpu_devices naming some GPUs, a record read from disk is touched only when its
        server is on one of them: by the GPUs it recorded (CUDA_VISIBLE_DEVICES at launch), else
        by what its live tree uses. One that cannot be told is left alone (another job's?)."""
        if rec.elsewhere is not None:
            return not rec.elsewhere
        rec.elsewhere = False
        if not self.devices or rec.source == "specbench_server":
            return True
        gpus = self.read_gpus()
        every = {g["index"] for g in gpus}
        if set(self.target_gpus) >= every:
            return True
        used, how = set(), "recorded"
        if rec.server.get("gpus"):
            try:
                used = set(gpu_state.resolve_devices(gpus, rec.server["gpus"]))
            except gpu_state.GpuStateError:
                used = set()
        if not used:
            how = "in use"
            held = proc_table.holders(proc_table.expand_nodes(self.device_glob), table)
            pid, start = rec.server["pid"], rec.server["starttime"]
            if pid in table and (start is None or table[pid].starttime == start):
                for member in {pid} | proc_table.descendants(pid, table):
                    used |= self._uses(member, gpus, self._gpu_nodes(gpus), held)
        if used & set(self.target_gpus):
            return True
        rec.elsewhere = True
        where = (f"on GPU {', '.join(map(str, sorted(used)))} ({how}), outside gpu_devices" if used else
                 "on GPUs that cannot be told (no GPUs recorded, none in use)")
        self.warnings.append(
            f"the server record {rec.source} names a server {where}: left alone, not retired (another "
            "job's?). Tear it down with gpu_devices naming its GPUs, or empty for every GPU.")
        return False

    def launched_tree(self, table) -> list:
        """(a): the verified members of the recorded trees that this teardown may signal."""
        chosen, seen = [], set()
        for rec in self.records:
            for info in self.tree_members(table, rec):
                if info.pid in seen:
                    continue
                seen.add(info.pid)
                if self._exempt(info, "launched"):
                    continue
                if not self._user_allowed(info):
                    self._skip(info, "launched", f"in the recorded tree but another user's ({info.user})")
                    continue
                chosen.append(info)
            if not rec.known and rec.unverified and rec.server["starttime"] is None and not rec.warned:
                rec.warned = True
                self.warnings.append(
                    f"recorded process group {rec.server['pgid']} ({rec.source}) no longer looks like the server: "
                    "no member matches gpu_kill_patterns or holds a device node (a stale record whose group id "
                    "was reused?); it is left alone.")
        return chosen

    def tree_gone(self, table) -> bool:
        """No verified member of any recorded tree is alive (a zombie holds nothing)."""
        return not any(self.tree_members(table, rec) for rec in self.records)

    def retire_record(self, table) -> list[str]:
        """Retire each record file once its tree is proven gone (or the record is void or stale):
        the files retired."""
        retired = []
        if self.check_mode:
            return retired
        for rec in self.records:
            if rec.void or rec.stale:
                reason = rec.void or "its pid belongs to another process now"
            elif not self.tree_members(table, rec):
                reason = "no process of the recorded tree is left"
            else:
                continue
            if rec.elsewhere:
                continue  # a record of a server outside gpu_devices
            for path in rec.paths:
                if os.path.exists(path) and retire_state_file(path, rec.server, reason, self.warnings):
                    retired.append(path)
        return retired

"""Emulated GPUs: device files in a folder, held by worker processes, with memory records.

Layout of the device folder (``--emulator-device-dir``)::

    nvidia0 .. nvidia{N-1}, nvidiactl, nvidia-uvm   plain files standing in for the nodes
    emulated-gpus.json                              the GPUs: index, uuid, name, MiB totals
    emulated-procs/<pid>.json                       one record per process that allocated

A record is ``{"pid", "starttime", "name", "memory_mib": {"<gpu index>": MiB}}`` (and, written
by tests, ``"graphics": true`` for a graphics process such as Xorg). The pid is the one /proc
shows (/proc/self), as drivers 565+ translate pids into the reader's namespace.
Like the driver, a reader counts a record only while that process is alive (same
``starttime`` in /proc/<pid>/stat, not a zombie: a defunct thread-group leader whose threads
still run, state Z with more than one thread, is alive) and holds the GPU's node open (an fd in
/proc/<pid>/fd, or for that defunct leader in its threads' /proc/<pid>/task/<tid>/fd, resolving
to it). Memory therefore vanishes when the last holder closes the
node or dies, whoever killed it, and a killed process leaves only a stale record.
Readers: plugins/module_utils (gpu_state's emulated backend) and this module's
``read_state`` for the emulator's own tests.
"""

from __future__ import annotations

import json
import os
import uuid

GPUS_FILE = "emulated-gpus.json"
PROCS_DIR = "emulated-procs"
IDLE_USED_MIB = 1  # what an idle emulated GPU reads, like an H100's 0-4 MiB


def node_names(count: int) -> list[str]:
    return [f"nvidia{i}" for i in range(count)] + ["nvidiactl", "nvidia-uvm"]


def ensure_device_dir(path: str, count: int, gpu_name: str, total_mib: int) -> dict:
    """Create the node files and the GPU inventory if missing; return the inventory.

    An existing inventory is kept (uuids stay stable across launches) unless the GPU count
    or model differs, in which case it is rewritten.
    """
    os.makedirs(os.path.join(path, PROCS_DIR), exist_ok=True)
    for name in node_names(count):
        node = os.path.join(path, name)
        if not os.path.exists(node):
            with open(node, "wb"):
                pass
    inv_path = os.path.join(path, GPUS_FILE)
    try:
        with open(inv_path, encoding="utf-8") as fh:
            inventory = json.load(fh)
        if len(inventory["gpus"]) == count and inventory["gpus"][0]["name"] == gpu_name:
            return inventory
    except (OSError, ValueError, KeyError, IndexError):
        pass
    inventory = {
        "driver_version": "590.48.01",
        "cuda_version": "13.1",
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{uuid.uuid4()}",
                "name": gpu_name,
                "memory_total_mib": total_mib,
                "memory_reserved_mib": 512,
                "idle_used_mib": IDLE_USED_MIB,
                "node": f"nvidia{i}",
            }
            for i in range(count)
        ],
    }
    tmp = inv_path + f".{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(inventory, fh, indent=1)
    os.replace(tmp, inv_path)
    return inventory


def proc_starttime(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            stat = fh.read()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def proc_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat; "Zl" (a defunct leader whose threads run) reads "L"."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return "L" if fields[0] == "Z" and int(fields[17]) > 1 else fields[0]


def fd_dirs(pid: int) -> list[str]:
    """Where pid's descriptors show: its own table, or its live threads' for a defunct leader."""
    if proc_state(pid) != "L":
        return [f"/proc/{pid}/fd"]
    try:
        tids = [t for t in os.listdir(f"/proc/{pid}/task") if t != str(pid)]
    except OSError:
        return []
    return [f"/proc/{pid}/task/{tid}/fd" for tid in tids]


def open_nodes(pid: int, device_dir: str) -> set[str]:
    """Names of the device folder's nodes that ``pid`` holds open."""
    real_dir = os.path.realpath(device_dir)
    held = set()
    for fd_dir in fd_dirs(pid):
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if os.path.dirname(target) == real_dir:
                held.add(os.path.basename(target))
    return held


def write_record(device_dir: str, name: str, memory_mib: dict[int, int]) -> str:
    try:
        pid = int(os.readlink("/proc/self"))  # the pid as /proc (and so the driver's reader) shows it
    except (OSError, ValueError):
        pid = os.getpid()
    record = {
        "pid": pid,
        "starttime": proc_starttime(pid),
        "name": name,
        "memory_mib": {str(k): int(v) for k, v in memory_mib.items()},
    }
    path = os.path.join(device_dir, PROCS_DIR, f"{pid}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)
    return path


def read_state(device_dir: str) -> dict:
    """Memory used per GPU and the processes it is attributed to, as the driver sees it."""
    with open(os.path.join(device_dir, GPUS_FILE), encoding="utf-8") as fh:
        inventory = json.load(fh)
    gpus = {g["index"]: dict(g, memory_used_mib=g.get("idle_used_mib", 0), processes=[]) for g in inventory["gpus"]}
    procs_dir = os.path.join(device_dir, PROCS_DIR)
    for entry in sorted(os.listdir(procs_dir)) if os.path.isdir(procs_dir) else []:
        if not entry.endswith(".json"):
            continue
        try:
            with open(os.path.join(procs_dir, entry), encoding="utf-8") as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            continue
        pid = rec.get("pid")
        if not isinstance(pid, int) or proc_starttime(pid) != rec.get("starttime") or proc_state(pid) in (None, "Z", "X"):
            continue
        held = open_nodes(pid, device_dir)
        for index, mib in rec.get("memory_mib", {}).items():
            gpu = gpus.get(int(index))
            if gpu is None or gpu["node"] not in held:
                continue
            gpu["memory_used_mib"] += int(mib)
            gpu["processes"].append({"pid": pid, "name": rec.get("name", ""), "used_memory_mib": int(mib),
                                     "type": "graphics" if rec.get("graphics") else "compute"})
    return {"driver_version": inventory.get("driver_version"), "gpus": [gpus[i] for i in sorted(gpus)]}

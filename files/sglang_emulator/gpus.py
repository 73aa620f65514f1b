"""Emulated GPUs: device files in a folder, held by worker processes, with memory records.

Layout of the device folder (``--emulator-device-dir``)::

    nvidia0 .. nvidia{N-1}, nvidiactl, nvidia-uvm   plain files standing in for the nodes
    emulated-gpus.json                              the GPUs: index, uuid, name, MiB totals
    emulated-procs/<pid>.json                       one record per process that allocated
    emulated-telemetry.bin                          power, energy and clocks per GPU (``Telemetry``)

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
import math
import mmap
import os
import struct
import time
import uuid

GPUS_FILE = "emulated-gpus.json"
PROCS_DIR = "emulated-procs"
IDLE_USED_MIB = 1  # what an idle emulated GPU reads, like an H100's 0-4 MiB
TELEMETRY_FILE = "emulated-telemetry.bin"
# One record per GPU index, at index * TELEMETRY_RECORD.size (little-endian): a sequence number
# (odd while the writer is in the middle of a record: a reader retries), then, as doubles, the
# CLOCK_MONOTONIC second t0 the record starts at, the energy counter at t0 (J), the power from t0
# to t_end (W), t_end, the idle power after t_end (W), the busy seconds at t0 and the SM clock
# from t0 to t_end (MHz). CLOCK_MONOTONIC is one clock for every process of the machine, so a
# reader extrapolates the counter to its own read time exactly as the model has it.
# The reader is plugins/module_utils/teardown/gpu_state.py (EmulatedBackend.telemetry).
TELEMETRY_RECORD = struct.Struct("<Q7d")


class PowerModel:
    """Board power of an emulated GPU as a function of what its step computes.

    While the engine runs a step over ``n`` tokens (a decode step: the running batch; a verify
    step: batch times draft tokens; a prefill: the prompt tokens), each of the server's GPUs draws

        P(n) = P_idle + (P_tdp - P_idle) * (f_min + (f_max - f_min) * (1 - exp(-n / n_half)))

    and P_idle between steps. Small batches are memory-bound (the weights streamed once per step
    at low SM activity), so decode at batch 1 draws well under the board limit; the draw rises with
    the tokens per step towards the limit as the step becomes compute-bound, which is why a verify
    pass over b * d draft tokens costs more power than a decode pass over b.

    Fitted to published H100 SXM5 figures (the constants are chosen inside their ranges, not
    fitted to one trace):

    * TDP 700 W and boost clock 1980 MHz (SXM5), HBM3 memory clock 2619 MHz: NVIDIA H100 Tensor
      Core GPU datasheet and ``nvidia-smi -q`` of an H100 SXM5 (Max Clocks).
    * Idle 70-100 W at the idle clocks (nvidia-smi on an idle H100 SXM5 reads about 70 W and an
      SM clock of 345 MHz): P_idle 75 W.
    * LLM decode on H100 draws from about 250-300 W at batch 1 to 550-650 W at large batches,
      staying under the 700 W limit (The ML.ENERGY Benchmark, Chung et al., arXiv:2505.06371,
      2025; Patel et al., "Characterizing Power Management Opportunities for LLMs in the Cloud",
      ASPLOS 2024, whose prefill phases come near the limit and decode phases do not):
      f_min 0.3 (about 260 W at one token per step), f_max 0.9 (about 640 W), n_half 96 tokens.

    The temperature follows the power (``temperature_c``), with no thermal lag: the emulated GPUs
    never throttle, and the clocks stay at boost while a step runs.
    """

    IDLE_W = 75.0
    TDP_W = 700.0
    F_MIN = 0.3
    F_MAX = 0.9
    N_HALF = 96.0
    SM_BOOST_MHZ = 1980.0
    SM_IDLE_MHZ = 345.0
    MEM_MHZ = 2619.0

    def power(self, tokens: float) -> float:
        """Watts per GPU while a step over ``tokens`` tokens runs."""
        frac = self.F_MIN + (self.F_MAX - self.F_MIN) * (1.0 - math.exp(-max(0.0, tokens) / self.N_HALF))
        return self.IDLE_W + (self.TDP_W - self.IDLE_W) * frac

    @staticmethod
    def temperature_c(power_w: float) -> float:
        """A coarse steady temperature: 30 C at no load, about 70 C at the board limit."""
        return 30.0 + power_w * 40.0 / 700.0


def init_telemetry(path: str, count: int) -> None:
    """A telemetry file of ``count`` idle records, unless one of that size exists."""
    tele = os.path.join(path, TELEMETRY_FILE)
    size = count * TELEMETRY_RECORD.size
    try:
        if os.path.getsize(tele) == size:
            return
    except OSError:
        pass
    now = time.monotonic()
    data = b"".join(TELEMETRY_RECORD.pack(0, now, 0.0, PowerModel.IDLE_W, now, PowerModel.IDLE_W, 0.0,
                                          PowerModel.SM_IDLE_MHZ) for _gpu in range(count))
    tmp = tele + f".{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, tele)


class Telemetry:
    """The engine's writer of its GPUs' records in the telemetry file (one mmap, no syscall a step)."""

    def __init__(self, device_dir: str, indexes: list[int], model: PowerModel | None = None):
        self.model = model or PowerModel()
        self.indexes = list(indexes)
        fd = os.open(os.path.join(device_dir, TELEMETRY_FILE), os.O_RDWR)
        try:
            self.map = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        self.state = {i: list(TELEMETRY_RECORD.unpack_from(self.map, i * TELEMETRY_RECORD.size))
                      for i in self.indexes}

    def step(self, start: float, end: float, tokens: float) -> None:
        """A step over ``tokens`` tokens runs from ``start`` to ``end`` (monotonic seconds)."""
        power = self.model.power(tokens)
        for i in self.indexes:
            seq, t0, e0, p, t_end, idle, busy, _sm = self.state[i]
            start_i = max(start, t0)
            energy = e0 + p * max(0.0, min(start_i, t_end) - t0) + idle * max(0.0, start_i - max(t0, t_end))
            busy += max(0.0, min(start_i, t_end) - t0)
            record = [seq + 2, start_i, energy, power, max(end, start_i), self.model.IDLE_W, busy,
                      self.model.SM_BOOST_MHZ]
            off = i * TELEMETRY_RECORD.size
            struct.pack_into("<Q", self.map, off, seq + 1)  # odd: being written
            struct.pack_into("<7d", self.map, off + 8, *record[1:])
            struct.pack_into("<Q", self.map, off, seq + 2)
            self.state[i] = record

    def close(self) -> None:
        self.map.close()


def rank_gpus(tp_size: int) -> list[int]:
    """The GPU index of each TP rank: CUDA_VISIBLE_DEVICES maps rank r to the r-th GPU listed, as
    CUDA does for SGLang's workers (a server for GPU 1 beside another job's server on GPU 0)."""
    visible = [int(v) for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip().isdigit()]
    return [visible[rank] if rank < len(visible) else rank for rank in range(tp_size)]


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
            init_telemetry(path, count)
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
    init_telemetry(path, count)
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

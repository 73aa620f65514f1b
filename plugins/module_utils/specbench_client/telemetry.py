# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU telemetry during every measuring window: power, energy, clocks, utilisation, memory,
temperature and clock-throttle reasons of the server's GPUs, sampled at a fixed cadence
(``telemetry_interval_s``) by a thread of the benchmark's own process on the node.

Readers (one sample format, one code path after the read):

* ``nvml``: NVIDIA's nvidia-ml-py (module ``pynvml``) where it is installed:
  nvmlDeviceGetPowerUsage (mW), nvmlDeviceGetTotalEnergyConsumption (mJ since the driver loaded;
  Volta and later), nvmlDeviceGetClockInfo (SM, memory), nvmlDeviceGetUtilizationRates,
  nvmlDeviceGetMemoryInfo, nvmlDeviceGetTemperature and the clock-event (throttle) reasons.
* ``emulated``: the SGLang emulator's GPUs, from ``emulated-telemetry.bin`` in its device folder
  (the emulator's gpus.PowerModel writes each step's power there; the same fields, in the same
  units, as NVML gives).

Only the server's GPUs are read and summed (pick_gpus: the GPUs NVML lists the server's processes on,
else its CUDA_VISIBLE_DEVICES, else its TP ranks from its info; every GPU only when none of these
answers); each window says which it read and how they were found (``gpus_read``).

The window's energy per GPU comes from the energy counter where the GPU has one
(``energy_source: counter``), else from the power samples integrated by the trapezoid rule
(``integrated power``). The counter only grows, so the samples either side of each window edge
bound the window's energy (``energy_j_bounds``); the point figure interpolates the counter
linearly at the edges. Standard library only, plus pynvml where it is installed.
"""
from __future__ import annotations

import mmap
import os
import socket
import struct
import threading
import time
import urllib.parse

# NVML's clock-event reasons (nvml.h, nvmlClocksEventReason*; "throttle reasons" before 12.2).
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# The reasons that make a window's figures depend on power or heat rather than on the mode.
CONFOUNDING_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
# SM clock moving more than this share of its maximum over a window's busy samples is a clock change.
CLOCK_CHANGE_SHARE = 0.05

EMULATED_FILE = "emulated-telemetry.bin"
# The emulator's record (sglang_emulator/gpus.py, TELEMETRY_RECORD): sequence number (odd while
# written), then t0, energy at t0 (J), power until t_end (W), t_end, idle power (W), busy seconds at
# t0, SM clock until t_end (MHz); times on CLOCK_MONOTONIC.
EMULATED_RECORD = struct.Struct("<Q7d")
EMULATED_MEM_MHZ = 2619.0
EMULATED_IDLE_SM_MHZ = 345.0


class TelemetryError(RuntimeError):
    """No telemetry can be read; the message says why and what to do."""


def names_of(bits: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if bits & bit]


class EmulatedReader:
    """The emulator's GPUs ``indexes`` in ``device_dir``."""

    source = "emulated"

    def __init__(self, device_dir: str, indexes: list[int]):
        path = os.path.join(device_dir, EMULATED_FILE)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise TelemetryError(f"{path} cannot be read ({exc}): the emulator writes it when it starts "
                                 "with --emulator-device-dir") from exc
        try:
            self.map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.indexes = list(indexes)
        self.how = "the emulator's server info (the GPU of each of its TP ranks)"
        self.last: dict[int, tuple[float, float]] = {}
        count = len(self.map) // EMULATED_RECORD.size
        missing = [i for i in self.indexes if i >= count]
        if missing:
            raise TelemetryError(f"{path} has {count} GPUs, not GPU {missing[0]}")

    def _record(self, index: int) -> tuple:
        off = index * EMULATED_RECORD.size
        while True:
            first = EMULATED_RECORD.unpack_from(self.map, off)
            if first[0] % 2 == 0 and struct.unpack_from("<Q", self.map, off)[0] == first[0]:
                return first
            time.sleep(0)

    def read(self) -> list[dict]:
        out = []
        for index in self.indexes:
            _seq, t0, e0, power, t_end, idle, busy0, sm = self._record(index)
            now = time.monotonic()
            stepping = now < t_end
            energy = e0 + power * max(0.0, min(now, t_end) - t0) + idle * max(0.0, now - max(t0, t_end))
            busy = busy0 + max(0.0, min(now, t_end) - t0)
            prev = self.last.get(index)
            if prev and now > prev[0]:
                util = 100.0 * min(1.0, max(0.0, (busy - prev[1]) / (now - prev[0])))
            else:
                util = 100.0 if stepping else 0.0
            self.last[index] = (now, busy)
            watts = power if stepping else idle
            out.append({"index": index, "t": now, "power_w": watts, "energy_j": energy,
                        "sm_clock_mhz": sm if stepping else EMULATED_IDLE_SM_MHZ, "mem_clock_mhz": EMULATED_MEM_MHZ,
                        "util_pct": util, "mem_used_mib": None, "temperature_c": 30.0 + watts * 40.0 / 700.0,
                        "throttle": 0 if stepping else 0x1})
        return out

    def close(self) -> None:
        self.map.close()


class NvmlReader:
    """NVML's view of GPUs ``indexes`` (every GPU when empty)."""

    source = "nvml"

    def __init__(self, indexes: list[int] | None = None, nvml=None):
        if nvml is None:
            try:
                import pynvml as nvml  # noqa: PLC0415 (optional on the node)
            except ImportError as exc:
                raise TelemetryError("nvidia-ml-py is not installed (import pynvml failed): install it on the node "
                                     "(pip install nvidia-ml-py) for GPU power and energy") from exc
        self.nvml = nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            raise TelemetryError(f"NVML cannot be read ({exc})") from exc
        self.count = count
        self.indexes = list(indexes) if indexes else list(range(count))
        self.handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indexes}
        self.how = "as asked" if indexes else "every GPU of the node"
        self.uuids: dict[int, str] = {}

    def node_view(self) -> tuple[dict[str, int], dict[int, set[int]]]:
        """Every GPU of the node's UUID ({uuid: index}) and the pids NVML lists on each ({index: pids})."""
        uuids, holders = {}, {}
        for index in range(self.count):
            handle = self._get("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                continue
            uuid = self._get("nvmlDeviceGetUUID", handle)
            if uuid:
                uuids[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = index
            procs = []
            for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                procs += self._get(fn, handle) or []
            holders[index] = {int(p.pid) for p in procs if getattr(p, "pid", None) is not None}
        return uuids, holders

    def select(self, indexes: list[int], how: str, uuids: dict[str, int] | None = None) -> None:
        """Read only GPUs ``indexes`` from now on; ``how``: how they were found (said in every window)."""
        try:
            self.handles = {i: self.nvml.nvmlDeviceGetHandleByIndex(i) for i in indexes}
        except self.nvml.NVMLError as exc:
            raise TelemetryError(f"NVML cannot open the server's GPUs {indexes} ({exc})") from exc
        self.indexes = list(indexes)
        self.how = how
        self.uuids = {i: u for u, i in (uuids or {}).items() if i in self.indexes}

    def _get(self, fn, *args):
        try:
            return getattr(self.nvml, fn)(*args)
        except (self.nvml.NVMLError, AttributeError):
            return None

    def read(self) -> list[dict]:
        nvml = self.nvml
        out = []
        for index, handle in self.handles.items():
            now = time.monotonic()
            power = self._get("nvmlDeviceGetPowerUsage", handle)
            energy = self._get("nvmlDeviceGetTotalEnergyConsumption", handle)
            util = self._get("nvmlDeviceGetUtilizationRates", handle)
            mem = self._get("nvmlDeviceGetMemoryInfo", handle)
            reasons = self._get("nvmlDeviceGetCurrentClocksEventReasons", handle)
            if reasons is None:
                reasons = self._get("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
            out.append({
                "index": index, "t": now,
                "power_w": None if power is None else power / 1000.0,
                "energy_j": None if energy is None else energy / 1000.0,
                "sm_clock_mhz": self._get("nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1)),
                "mem_clock_mhz": self._get("nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_MEM", 2)),
                "util_pct": None if util is None else float(util.gpu),
                "mem_used_mib": None if mem is None else int(mem.used) // (1024 * 1024),
                "temperature_c": self._get("nvmlDeviceGetTemperature", handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)),
                "throttle": int(reasons or 0),
            })
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "[::1]")


def is_local(host: str) -> bool:
    """Whether ``host`` (a base URL's) is this machine."""
    return host in LOCAL_HOSTS or host in (socket.gethostname(), socket.getfqdn())


def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def pick_gpus(count: int, hints: dict | None, info: dict | None, uuids: dict[str, int] | None = None,
              holders: dict[int, set[int]] | None = None) -> tuple[list[int], str]:
    """The server's GPUs among the node's ``count`` (NVML indexes), and how they were found, the first that
    answers of:

    1. the GPUs on which NVML lists a process of the server's tree (``hints["pids"]``: the process listening on
       the server's port and its descendants, found on the node by bench_sweep);
    2. the server process's CUDA_VISIBLE_DEVICES (``hints["visible"]``: indexes or GPU UUIDs), cut to the GPUs
       its ranks use where its info gives them (SGLang: ``base_gpu_id`` and ``tp_size`` x ``dp_size``);
    3. the ranks' GPUs from the info alone, ``base_gpu_id`` on (CUDA's order taken as NVML's);
    4. every GPU of the node, said so.
    """
    hints, info = hints or {}, info if isinstance(info, dict) else {}
    tree = {int(p) for p in hints.get("pids") or []}
    if tree and holders:
        held = sorted(i for i, pids in holders.items() if pids & tree)
        if held:
            return held, "the GPUs on which NVML lists a process of the server (the process on its port or a child)"
    ranks = _int(info.get("tp_size"), 0) * max(1, _int(info.get("dp_size"), 1)) if info.get("tp_size") else 0
    base = max(0, _int(info.get("base_gpu_id"), 0))
    visible = [v.strip() for v in str(hints.get("visible") or "").split(",") if v.strip()]
    if visible:
        indexes = []
        for item in visible:
            if item.isdigit() and int(item) < count:
                indexes.append(int(item))
            elif uuids and any(u.startswith(item) for u in uuids):  # CUDA takes a UUID's unique prefix
                indexes.append(next(i for u, i in uuids.items() if u.startswith(item)))
            else:
                break  # CUDA ignores what follows an invalid entry
        if indexes:
            used = indexes[base:base + ranks] if ranks and len(indexes) >= base + ranks else indexes
            return used, ("the server's CUDA_VISIBLE_DEVICES=" + ",".join(visible)
                          + (f" (its {ranks} rank(s) from GPU {base} of them)" if used != indexes else ""))
    if ranks and base + ranks <= count:
        return (list(range(base, base + ranks)),
                f"the server's tp_size x dp_size = {ranks} from GPU {base} (its info; CUDA's order taken as NVML's)")
    return list(range(count)), "every GPU of the node (the server's own could not be found: its GPUs are unknown)"


def open_reader(server: dict, base_url: str = "", nvml=None):
    """The reader for ``server``'s GPUs: the emulator's own where it names its device folder, else
    NVML for the server's GPUs (pick_gpus), when the server listens on this machine. (None, why) when
    none can be read. ``nvml``: the pynvml module (imported when None)."""
    emu = (server.get("server_info") or {}).get("emulator") if isinstance(server.get("server_info"), dict) else None
    host = urllib.parse.urlsplit(base_url).hostname or "" if base_url else ""
    if host and not is_local(host):
        return None, (f"the server ({host}) is not on the machine the client runs on: its GPUs cannot be read "
                      "from here (run the client on the server's node)")
    try:
        if isinstance(emu, dict):
            if not emu.get("device_dir") or not emu.get("gpus"):
                return None, "the emulator runs without --emulator-device-dir: it has no GPUs to read"
            return EmulatedReader(emu["device_dir"], [int(i) for i in emu["gpus"]]), None
        reader = NvmlReader(nvml=nvml)
        uuids, holders = reader.node_view()
        reader.select(*pick_gpus(reader.count, server.get("gpu_hints"), server.get("server_info"), uuids, holders),
                      uuids)
        return reader, None
    except TelemetryError as exc:
        return None, str(exc)


class TelemetrySampler(threading.Thread):
    """Reads every GPU every ``interval`` seconds from ``start_at`` until halted, with one read
    before ``start_at`` and one after the halt, so each window edge lies between two samples."""

    def __init__(self, reader, interval: float, start_at: float):
        super().__init__(daemon=True)
        self.reader = reader
        self.interval = interval
        self.start_at = start_at
        self.samples: list[list[dict]] = []
        self.error: str | None = None
        self.halt = threading.Event()

    def sample(self) -> None:
        try:
            self.samples.append(self.reader.read())
        except Exception as exc:  # noqa: BLE001 (a driver error ends sampling, never the level)
            self.error = f"{type(exc).__name__}: {exc}"
            self.halt.set()

    def run(self) -> None:
        self.sample()
        wait = self.start_at - time.monotonic()
        if wait > 0:
            self.halt.wait(wait)
        next_t = time.monotonic()
        while not self.halt.is_set():
            self.sample()
            next_t += self.interval
            self.halt.wait(max(0.0, next_t - time.monotonic()))
        if self.error is None:
            self.sample()

    def over_window(self, ws: float, we: float) -> dict | None:
        out = window_telemetry(self.samples, ws, we, self.interval, self.reader.source, self.error)
        if out is not None:  # which GPUs were read, and how they were found to be the server's
            out["gpus_read"] = {"indexes": list(self.reader.indexes), "how": self.reader.how}
            if getattr(self.reader, "uuids", None):
                out["gpus_read"]["uuids"] = [self.reader.uuids.get(i) for i in self.reader.indexes]
        return out


def _at(series: list[tuple[float, float]], t: float) -> tuple[float, float, float] | None:
    """(lower bound, linear interpolation, upper bound) of a growing series at t, None outside it."""
    before = [p for p in series if p[0] <= t]
    after = [p for p in series if p[0] >= t]
    if not before or not after:
        return None
    (t1, v1), (t2, v2) = before[-1], after[0]
    mid = v1 if t2 == t1 else v1 + (v2 - v1) * (t - t1) / (t2 - t1)
    return v1, mid, v2


def _integrated(series: list[tuple[float, float]], ws: float, we: float) -> float | None:
    """The trapezoid integral of power over [ws, we], power interpolated at the edges."""
    inside = [p for p in series if ws < p[0] < we]
    start, end = _at(series, ws), _at(series, we)
    if start is None or end is None:
        return None
    points = [(ws, start[1])] + inside + [(we, end[1])]
    return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(points, points[1:]))  # noqa: B905


def window_telemetry(samples: list[list[dict]], ws: float, we: float, interval: float, source: str,
                     error: str | None = None) -> dict | None:
    """Per GPU over [ws, we]: energy (with its source and bounds), power, clocks, utilisation,
    memory, temperature and throttle reasons; the sum of the GPUs' energy; confounders."""
    if not samples or we <= ws:
        return None
    by_gpu: dict[int, list[dict]] = {}
    for sweep in samples:
        for s in sweep:
            by_gpu.setdefault(s["index"], []).append(s)
    gpus = []
    total, lo_total, hi_total, sources, confounders = 0.0, 0.0, 0.0, set(), []
    for index, rows in sorted(by_gpu.items()):
        inside = [r for r in rows if ws <= r["t"] <= we]
        counter = [(r["t"], r["energy_j"]) for r in rows if r["energy_j"] is not None]
        start, end = _at(counter, ws), _at(counter, we)
        integrated = _integrated([(r["t"], r["power_w"]) for r in rows if r["power_w"] is not None], ws, we)
        if start is not None and end is not None:
            energy, bounds, how = end[1] - start[1], [end[0] - start[2], end[2] - start[0]], "counter"
        else:
            energy, bounds, how = integrated, None, "integrated power"
        if energy is None:
            return {"source": source, "error": f"GPU {index}: no samples either side of the window", "gpus": []}
        sources.add(how)
        total += energy
        if bounds and lo_total is not None:
            lo_total += bounds[0]
            hi_total += bounds[1]
        else:
            lo_total = hi_total = None
        powers = [r["power_w"] for r in inside if r["power_w"] is not None]
        busy = [r for r in inside if not r["throttle"] & 0x1]
        clocks = [r["sm_clock_mhz"] for r in busy if r["sm_clock_mhz"] is not None]
        bits = 0
        for r in inside:
            bits |= r["throttle"]
        gpu = {
            "index": index, "energy_j": round(energy, 4), "energy_source": how,
            "energy_j_bounds": None if bounds is None else [round(bounds[0], 4), round(bounds[1], 4)],
            "samples": len(inside),
            "power_w_mean": round(energy / (we - ws), 2),
            "power_w_max": round(max(powers), 2) if powers else None,
            "power_w_min": round(min(powers), 2) if powers else None,
            # the power samples integrated by the trapezoid rule, beside the counter (a check of one on the other)
            "power_integrated_j": None if integrated is None else round(integrated, 4),
            "sm_clock_mhz": [min(clocks), max(clocks)] if clocks else None,
            "mem_clock_mhz": _span([r["mem_clock_mhz"] for r in inside]),
            "util_pct_mean": _mean([r["util_pct"] for r in inside]),
            "mem_used_mib_max": max((r["mem_used_mib"] for r in inside if r["mem_used_mib"] is not None), default=None),
            "temperature_c_max": max((r["temperature_c"] for r in inside if r["temperature_c"] is not None),
                                     default=None),
            "throttle_reasons": names_of(bits),
        }
        gpus.append(gpu)
        if bits & CONFOUNDING_BITS:
            confounders.append(f"GPU {index} throttled during the window ({', '.join(names_of(bits & CONFOUNDING_BITS))})")
        if clocks and max(clocks) > 0 and (max(clocks) - min(clocks)) / max(clocks) > CLOCK_CHANGE_SHARE:
            confounders.append(f"GPU {index}'s SM clock moved {min(clocks):g}-{max(clocks):g} MHz while busy in the window")
    out = {
        "source": source, "interval_s": interval, "window_s": round(we - ws, 4),
        "energy_source": " and ".join(sorted(sources)),
        "energy_j": round(total, 4),
        "energy_j_bounds": None if lo_total is None else [round(lo_total, 4), round(hi_total, 4)],
        "gpus": gpus, "confounders": confounders,
    }
    if error:
        out["error"] = error
    return out


def _span(values):
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else None


def _mean(values):
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 2) if values else None


def level_energy(windows: list[dict | None], tokens: list[float]) -> dict:
    """A level's energy per output token over its repeats' windows: the windows' joules over
    the tokens that arrived in them, with the bounds the counter's samples allow."""
    usable = [(w, n) for w, n in zip(windows, tokens) if w and "energy_j" in w and n]  # noqa: B905
    if not usable:
        return {"energy_j_per_output_token": None}
    joules = sum(w["energy_j"] for w, _n in usable)
    count = sum(n for _w, n in usable)
    out = {"energy_j_per_output_token": round(joules / count, 6), "energy_output_tokens": round(count, 1)}
    if all(w.get("energy_j_bounds") for w, _n in usable):
        lo = sum(w["energy_j_bounds"][0] for w, _n in usable)
        hi = sum(w["energy_j_bounds"][1] for w, _n in usable)
        out["energy_j_per_output_token_bounds"] = [round(lo / count, 6), round(hi / count, 6)]
    return out

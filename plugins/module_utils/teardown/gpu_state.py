# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""What the GPUs hold: memory per GPU, compute processes, and who holds the device nodes.

Backends (one implementation each, shared by the gpu_state and gpu_teardown modules):

* ``nvml``: NVIDIA's nvidia-ml-py (module ``pynvml``), memory through the v2 struct
  (``used`` matches nvidia-smi; v1 counts driver-reserved memory as used).
* ``nvidia-smi``: ``--query-gpu`` and ``--query-compute-apps`` CSV, for nodes without
  nvidia-ml-py.
* ``emulated``: the SGLang emulator's GPUs (a device folder with emulated-gpus.json and
  emulated-procs/<pid>.json, see docs/CONTRACTS.md), read by the driver's rules: a record
  counts only while its process is alive (same starttime, not a zombie) and holds that
  GPU's node open.
* ``auto``: nvml, else nvidia-smi when nvidia-ml-py or its library is missing.

Standard library only, plus pynvml where it is installed.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table

BACKENDS = ("auto", "nvml", "nvidia-smi", "emulated")
MIB = 1024 * 1024
IDLE_NOISE_MIB = 8  # what an idle GPU may read with no process (H100/H200: 0-4 MiB)
EMULATED_GPUS_FILE = "emulated-gpus.json"
EMULATED_PROCS_DIR = "emulated-procs"

LXC_HINT = (
    "In an LXC container the user-space driver must be exactly the host's version, installed "
    "without the kernel module (NVIDIA-Linux-*.run --no-kernel-module)."
)


class GpuStateError(Exception):
    """A GPU backend that cannot answer; ``kind`` says which of the known failures it is."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


# --------------------------------------------------------------------------- versions


def kernel_module_version() -> str | None:
    """The loaded kernel module's version from /proc/driver/nvidia/version, if any."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    return None


def library_versions() -> list[str]:
    """Versions of the libnvidia-ml.so.<version> files installed in the usual places."""
    found = set()
    for pattern in (
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*",
        "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.*.*",
        "/usr/lib64/libnvidia-ml.so.*.*",
        "/usr/lib/libnvidia-ml.so.*.*",
    ):
        for path in glob.glob(pattern):
            found.add(os.path.basename(path)[len("libnvidia-ml.so.") :])
    return sorted(found)


def mismatch_message(source: str) -> str:
    kernel = kernel_module_version() or "unknown"
    libs = ", ".join(library_versions()) or "unknown"
    return (
        f"The NVIDIA user-space library and kernel module versions differ ({source}): "
        f"libnvidia-ml {libs}, kernel module {kernel}. {LXC_HINT} On a bare host, reboot (or "
        "reload the nvidia modules) after a driver upgrade."
    )


def no_library_message(source: str) -> str:
    return (
        f"No NVIDIA driver library on this node ({source}): libnvidia-ml.so.1 was not found. "
        f"Install the NVIDIA driver's user-space libraries. {LXC_HINT} For the SGLang emulator "
        "set gpu_backend: emulated."
    )


def driver_not_loaded_message(source: str) -> str:
    return (
        f"The NVIDIA kernel driver is not loaded ({source}). Load it on the host (modprobe nvidia; "
        "see dmesg); a container uses the host's driver, so check it on the Proxmox host and that "
        "/dev/nvidia* are passed through."
    )


def no_gpu_message(source: str) -> str:
    return (
        f"No NVIDIA GPU found ({source}): the driver answers but lists no device. Check that the "
        "GPUs are passed through to this container (lxc.cgroup2.devices.allow: c 195:* rwm and the "
        "/dev/nvidia* mount entries) and not bound to another driver (vfio-pci)."
    )


# --------------------------------------------------------------------------- backends


class Backend:
    """Reads the GPUs; the emulated one also knows what its stand-in driver pretends."""

    name = "none"
    driver_version: str | None = None

    def read_gpus(self) -> list[dict]:
        raise NotImplementedError

    def hidden_pids(self) -> set[int]:
        """Processes this namespace cannot see (only the emulated backend simulates them)."""
        return set()

    def state_of(self, pid: int) -> str | None:
        """A state the driver imposes on pid (emulated D state), else None."""
        return None

    def deliverable(self, pid: int) -> bool:
        """False when a signal to pid cannot take effect (emulated D state)."""
        return True

    def close(self) -> None:
        pass


def gpu_record(index, uuid, name, *, used, total, reserved, processes, node=None) -> dict:
    return {
        "index": int(index),
        "uuid": uuid,
        "name": name,
        "memory_used_mib": used,
        "memory_total_mib": total,
        "memory_reserved_mib": reserved,
        "processes": processes,
        "node": node,
    }


class NvmlBackend(Backend):
    """NVML through nvidia-ml-py; initialised once, shut down by close()."""

    name = "nvml"

    def __init__(self, nvml=None):
        if nvml is None:
            try:
                import pynvml as nvml  # noqa: PLC0415 (optional on the node)
            except ImportError as exc:
                raise GpuStateError(
                    "no_library",
                    "nvidia-ml-py is not installed (import pynvml failed: "
                    f"{exc}). Install it (pip install nvidia-ml-py, NVIDIA's package; not the deprecated "
                    "'pynvml' package) or set gpu_backend: nvidia-smi.",
                ) from exc
        self.nvml = nvml
        self._initialised = False
        try:
            nvml.nvmlInit()
            self._initialised = True
            self.driver_version = _text(nvml.nvmlSystemGetDriverVersion())
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            self.close()
            raise self.translate(exc) from exc
        if count == 0:
            self.close()
            raise GpuStateError("no_gpu", no_gpu_message("NVML: nvmlDeviceGetCount() is 0"))
        self.count = count

    def translate(self, exc) -> GpuStateError:
        nvml = self.nvml
        value = getattr(exc, "value", None)
        source = f"NVML: {exc}"
        if value == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
            return GpuStateError("no_library", no_library_message(source))
        if value == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
            return GpuStateError("driver_not_loaded", driver_not_loaded_message(source))
        if value == getattr(nvml, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18):
            return GpuStateError("version_mismatch", mismatch_message(source))
        if value == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
            return GpuStateError(
                "no_permission",
                f"NVML refused access ({source}): run as root or as a user allowed to open /dev/nvidia*.",
            )
        return GpuStateError("nvml_error", f"NVML failed ({source}).")

    def _processes(self, handle) -> list[dict]:
        nvml = self.nvml
        seen: dict[int, dict] = {}
        for getter, kind in (
            ("nvmlDeviceGetComputeRunningProcesses", "compute"),
            ("nvmlDeviceGetMPSComputeRunningProcesses", "compute"),
            ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"),
        ):
            fn = getattr(nvml, getter, None)
            if fn is None:
                continue
            try:
                items = fn(handle)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3):
                    continue
                raise
            for item in items:
                used = getattr(item, "usedGpuMemory", None)
                mib = None if used is None else int(used) // MIB
                entry = seen.setdefault(int(item.pid), {"pid": int(item.pid), "used_memory_mib": mib, "type": kind})
                if mib is not None:
                    entry["used_memory_mib"] = max(entry["used_memory_mib"] or 0, mib)
        return sorted(seen.values(), key=lambda p: p["pid"])

    def read_gpus(self) -> list[dict]:
        nvml = self.nvml
        gpus = []
        try:
            for index in range(self.count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
                try:
                    node = f"/dev/nvidia{nvml.nvmlDeviceGetMinorNumber(handle)}"
                except nvml.NVMLError:
                    node = None
                gpus.append(
                    gpu_record(
                        index,
                        _text(nvml.nvmlDeviceGetUUID(handle)),
                        _text(nvml.nvmlDeviceGetName(handle)),
                        used=int(mem.used) // MIB,
                        total=int(mem.total) // MIB,
                        reserved=int(getattr(mem, "reserved", 0) or 0) // MIB,
                        processes=self._processes(handle),
                        node=node,
                    )
                )
        except nvml.NVMLError as exc:
            raise self.translate(exc) from exc
        return gpus

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _mib(field: str) -> int | None:
    field = field.strip()
    try:
        return int(float(field))
    except ValueError:
        return None  # [N/A], [Not Supported], [Insufficient Permissions]


def minors_by_uuid(root: str = "/proc/driver/nvidia/gpus") -> dict[str, int]:
    """{GPU UUID: device minor} from the driver's per-GPU information files (nvidia-smi has no
    query field for the minor number, which names the GPU's /dev/nvidia<minor> node)."""
    found = {}
    for path in glob.glob(os.path.join(root, "*", "information")):
        try:
            with open(path, encoding="utf-8") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
            found[fields["GPU UUID"].strip()] = int(fields["Device Minor"].strip())
        except (OSError, KeyError, ValueError):
            continue
    return found


def parse_query(text: str) -> list[dict]:
    """``nvidia-smi -q`` (or ``-q -d PIDS``): per GPU its bus id, top-level fields (GPU UUID,
    Minor Number) and processes (pid, type compute or graphics, used_memory_mib)."""
    blocks: list[dict] = []
    proc = None
    for line in text.splitlines():
        if line.startswith("GPU ") and ":" in line and not line.startswith("GPU UUID"):
            blocks.append({"bus_id": line[4:].strip(), "processes": []})
            proc = None
            continue
        if not blocks or ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        depth = len(line) - len(line.lstrip())
        if key == "Process ID" and value.isdigit():
            proc = {"pid": int(value), "used_memory_mib": None, "type": "compute"}
            blocks[-1]["processes"].append(proc)
        elif proc is not None and key == "Type":
            proc["type"] = "graphics" if value.startswith("G") else "compute"  # C, G, C+G, M (MPS)
        elif proc is not None and key == "Used GPU Memory":
            proc["used_memory_mib"] = _mib(value.split()[0]) if value else None
        elif depth == 4:
            blocks[-1].setdefault(key, value)
    return blocks


class NvidiaSmiBackend(Backend):
    """nvidia-smi's CSV queries (the same ones SGLang's killall uses)."""

    name = "nvidia-smi"
    GPU_FIELDS = "index,uuid,name,memory.used,memory.total,memory.reserved,driver_version,pci.bus_id"
    APP_FIELDS = "pid,used_memory,gpu_uuid,process_name"

    def __init__(self, binary: str = "nvidia-smi", run=subprocess.run, device_dir: str = "/dev"):
        path = binary if os.sep in binary else shutil.which(binary)
        if not path or not os.access(path, os.X_OK):
            raise GpuStateError(
                "no_library",
                f"nvidia-smi not found (gpu_nvidia_smi: {binary!r}): the NVIDIA driver's user-space tools "
                "are not installed. Install them, or point gpu_nvidia_smi at the binary. " + LXC_HINT,
            )
        self.binary = path
        self.run = run
        self.device_dir = device_dir
        self.minors: dict[str, int] | None = None
        self.gpu_fields = self.GPU_FIELDS
        self.read_gpus()  # fail now, with the precise reason, if it cannot answer

    def _run(self, args: list[str]) -> str:
        try:
            proc = self.run([self.binary, *args], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise GpuStateError("nvidia_smi_failed", f"{self.binary} could not run: {exc}") from exc
        if proc.returncode != 0:
            raise self.translate(proc.returncode, (proc.stdout or "") + (proc.stderr or ""))
        return proc.stdout or ""

    def _minors(self, uuids: list[str]) -> dict[str, int]:
        """{UUID: minor}: the driver's /proc entries, else ``nvidia-smi -q`` (Minor Number), read once."""
        if self.minors is None or not set(uuids) <= set(self.minors):
            found = minors_by_uuid()
            if not set(uuids) <= set(found):
                for block in parse_query(self._run(["-q"])):
                    minor = block.get("Minor Number", "")
                    if block.get("GPU UUID") and minor.isdigit():
                        found.setdefault(block["GPU UUID"], int(minor))
            self.minors = found
        return self.minors

    def _graphics(self) -> dict[str, list[dict]]:
        """{bus id: graphics processes}, from ``nvidia-smi -q -d PIDS`` (no CSV query lists them)."""
        found: dict[str, list[dict]] = {}
        for block in parse_query(self._run(["-q", "-d", "PIDS"])):
            found[block["bus_id"].upper()] = [p for p in block["processes"] if p["type"] == "graphics"]
        return found

    def _query(self, what: str, fields: str) -> list[list[str]]:
        try:
            proc = self.run(
                [self.binary, f"--query-{what}={fields}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise GpuStateError("nvidia_smi_failed", f"{self.binary} could not run: {exc}") from exc
        text = (proc.stdout or "") + (proc.stderr or "")
        if proc.returncode != 0:
            raise self.translate(proc.returncode, text)
        rows = []
        for line in (proc.stdout or "").splitlines():
            if line.strip():
                rows.append([cell.strip() for cell in line.split(",", len(fields.split(",")) - 1)])
        return rows

    def translate(self, returncode: int, text: str) -> GpuStateError:
        source = f"{self.binary} exit {returncode}: {text.strip()[:300]}"
        low = text.lower()
        if "version mismatch" in low:
            return GpuStateError("version_mismatch", mismatch_message(source))
        if "couldn't communicate with the nvidia driver" in low or "driver not loaded" in low:
            return GpuStateError("driver_not_loaded", driver_not_loaded_message(source))
        if "libnvidia-ml.so" in low or "nvml shared library not found" in low:
            return GpuStateError("no_library", no_library_message(source))
        if "no devices were found" in low:
            return GpuStateError("no_gpu", no_gpu_message(source))
        if "is not a valid field" in low:
            return GpuStateError("bad_field", source)
        return GpuStateError("nvidia_smi_failed", f"nvidia-smi failed ({source}).")

    def read_gpus(self) -> list[dict]:
        try:
            rows = self._query("gpu", self.gpu_fields)
        except GpuStateError as exc:
            if exc.kind != "bad_field" or "memory.reserved" not in self.gpu_fields:
                raise
            # older nvidia-smi: no memory.reserved field
            self.gpu_fields = self.GPU_FIELDS.replace(",memory.reserved", "")
            rows = self._query("gpu", self.gpu_fields)
        has_reserved = "memory.reserved" in self.gpu_fields
        if not rows:
            raise GpuStateError("no_gpu", no_gpu_message(f"{self.binary} lists no GPU"))
        apps: dict[str, list[dict]] = {}
        for row in self._query("compute-apps", self.APP_FIELDS):
            if len(row) < 3 or not row[0].isdigit():
                continue
            apps.setdefault(row[2], []).append({"pid": int(row[0]), "used_memory_mib": _mib(row[1]), "type": "compute"})
        gpus, buses = [], {}
        for row in rows:
            if has_reserved:
                index, uuid, name, used, total, reserved, driver, bus = (row + [""] * 8)[:8]
            else:
                index, uuid, name, used, total, driver, bus = (row + [""] * 7)[:7]
                reserved = "0"
            self.driver_version = driver or self.driver_version
            buses[int(index)] = bus.upper()
            gpus.append(
                gpu_record(
                    index, uuid, name, used=_mib(used), total=_mib(total), reserved=_mib(reserved) or 0,
                    processes=sorted(apps.get(uuid, []), key=lambda p: p["pid"]), node=None,
                )
            )
        minors = self._minors([g["uuid"] for g in gpus])
        for gpu in gpus:
            minor = minors.get(gpu["uuid"])
            gpu["node"] = None if minor is None else os.path.join(self.device_dir, f"nvidia{minor}")
        # memory no compute process explains (beyond an idle GPU's few MiB): ask for graphics processes
        unexplained = [g for g in gpus
                       if (g["memory_used_mib"] or 0) - sum(p["used_memory_mib"] or 0 for p in g["processes"])
                       > IDLE_NOISE_MIB]
        if unexplained:
            graphics = self._graphics()
            for gpu in unexplained:
                gpu["processes"] = sorted(gpu["processes"] + graphics.get(buses[gpu["index"]], []),
                                          key=lambda p: p["pid"])
        return gpus


class EmulatedBackend(Backend):
    """The emulator's GPUs in a device folder; see docs/CONTRACTS.md for the records.

    Three record fields simulate what only a real node can show (CONTRACTS.md, "Emulated
    teardown cases"): ``emulated_state: "D"`` (the process is stuck in the driver: reported
    in state D, signals to it do not take effect), ``outside_namespace: true`` (the
    process stands for one in another PID namespace: its memory counts on the GPU but it is
    listed neither as a compute process nor as a holder, and cannot be signalled) and
    ``unlisted: true`` (a driver that cannot attribute memory to this namespace's processes:
    the memory counts, the process holds the node visibly, but no compute process is listed).
    """

    name = "emulated"

    def __init__(self, device_dir: str):
        self.device_dir = device_dir
        self._stuck: set[int] = set()
        self._hidden: set[int] = set()
        self.gpu_count = None

    def _inventory(self) -> dict | None:
        path = os.path.join(self.device_dir, EMULATED_GPUS_FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                inventory = json.load(fh)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise GpuStateError(
                "bad_input",
                f"{path} is not readable JSON ({exc}): delete the folder {self.device_dir} and let the "
                "emulator recreate it at its next launch.",
            ) from exc
        if not isinstance(inventory, dict) or not isinstance(inventory.get("gpus"), list):
            raise GpuStateError("bad_input", f"{path} has no 'gpus' list: delete it and relaunch the emulator.")
        return inventory

    def read_gpus(self) -> list[dict]:
        inventory = self._inventory()
        if inventory is None:
            # no emulator has run here yet: no emulated GPU, nothing to clean
            self.gpu_count = 0
            return []
        self.driver_version = inventory.get("driver_version")
        gpus = {}
        nodes = {}
        for g in inventory["gpus"]:
            index = int(g["index"])
            nodes[index] = os.path.realpath(os.path.join(self.device_dir, g.get("node", f"nvidia{index}")))
            gpus[index] = gpu_record(
                index, g.get("uuid"), g.get("name"), used=int(g.get("idle_used_mib", 0)),
                total=int(g.get("memory_total_mib", 0)), reserved=int(g.get("memory_reserved_mib", 0)),
                processes=[], node=nodes[index],
            )
        stuck, hidden = set(), set()
        procs_dir = os.path.join(self.device_dir, EMULATED_PROCS_DIR)
        entries = sorted(os.listdir(procs_dir)) if os.path.isdir(procs_dir) else []
        for entry in entries:
            if not entry.endswith(".json"):
                continue
            try:
                with open(os.path.join(procs_dir, entry), encoding="utf-8") as fh:
                    rec = json.load(fh)
            except (OSError, ValueError):
                continue
            pid = rec.get("pid") if isinstance(rec, dict) else None
            if not isinstance(pid, int):
                continue
            info = proc_table.read_proc(pid)
            if info is None or info.starttime != rec.get("starttime") or not proc_table.alive(pid, info.starttime):
                continue  # a defunct leader whose threads run ("Zl") is alive, as real NVML lists it
            if proc_table.fds_readable(pid):
                held = proc_table.open_nodes(pid, set(nodes.values()), info.state, info.threads)
            else:
                # another user's process read by a non-root user: the driver sees its memory
                # whatever this reader may look at, so the record counts as it stands
                held = set(nodes.values())
            counted = False
            for index, mib in (rec.get("memory_mib") or {}).items():
                gpu = gpus.get(int(index))
                if gpu is None or nodes[int(index)] not in held:
                    continue
                gpu["memory_used_mib"] += int(mib)
                counted = True
                if not rec.get("outside_namespace") and not rec.get("unlisted"):
                    gpu["processes"].append({"pid": pid, "used_memory_mib": int(mib),
                                             "type": "graphics" if rec.get("graphics") else "compute"})
            if rec.get("outside_namespace"):
                hidden.add(pid)
            if counted and rec.get("emulated_state") == "D":
                stuck.add(pid)
        self._stuck, self._hidden = stuck, hidden
        self.gpu_count = len(gpus)
        return [gpus[i] for i in sorted(gpus)]

    def hidden_pids(self) -> set[int]:
        return set(self._hidden)

    def state_of(self, pid: int) -> str | None:
        return "D" if pid in self._stuck else None

    def deliverable(self, pid: int) -> bool:
        return pid not in self._stuck and pid not in self._hidden


def emulated_device_dir(device_glob: str) -> str:
    """The folder of an emulated device glob (its last component may be a pattern)."""
    folder = os.path.dirname(device_glob)
    if not folder or glob.has_magic(folder):
        raise GpuStateError(
            "bad_input",
            f"gpu_device_glob {device_glob!r}: the emulated backend needs one folder with a pattern "
            "only in the last part, e.g. '{{ specbench_emulator_device_dir }}/nvidia*'.",
        )
    return folder


def open_backend(backend: str, device_glob: str, nvidia_smi: str = "nvidia-smi", nvml=None, run=subprocess.run):
    """The backend asked for; auto tries NVML, then nvidia-smi when NVML is not installed."""
    if backend not in BACKENDS:
        raise GpuStateError("bad_input", f"gpu_backend {backend!r} is not one of {', '.join(BACKENDS)}.")
    if backend == "emulated":
        return EmulatedBackend(emulated_device_dir(device_glob))
    device_dir = os.path.dirname(device_glob) or "/dev"
    if backend == "nvidia-smi":
        return NvidiaSmiBackend(nvidia_smi, run, device_dir)
    if backend == "nvml":
        return NvmlBackend(nvml)
    try:
        return NvmlBackend(nvml)
    except GpuStateError as exc:
        if exc.kind != "no_library":
            raise
        try:
            return NvidiaSmiBackend(nvidia_smi, run, device_dir)
        except GpuStateError as smi_exc:
            if smi_exc.kind == "no_library":
                raise GpuStateError(
                    "no_library", f"{exc} No nvidia-smi either (gpu_nvidia_smi: {nvidia_smi!r})."
                ) from smi_exc
            raise


# --------------------------------------------------------------------------- the state


def holder_record(info: proc_table.ProcInfo, nodes: list[str], backend: Backend) -> dict:
    state = backend.state_of(info.pid) or info.state
    return {
        "pid": info.pid,
        "user": info.user,
        "name": info.comm,
        "cmdline": info.command,
        "state": state,
        "state_text": proc_table.STATE_TEXT.get(state, state),
        "nodes": nodes,
    }


def resolve_devices(gpus: list[dict], devices) -> list[int]:
    """The indexes of the GPUs that ``devices`` (indexes or UUIDs; empty: all) names."""
    every = [g["index"] for g in gpus]
    if not devices or not gpus:
        return every
    if not isinstance(devices, list):
        devices = [devices]
    chosen = []
    known = ", ".join(f"{g['index']} ({g['uuid']})" for g in gpus)
    for item in devices:
        text = str(item).strip()
        if text.isdigit():
            index = int(text)
            found = [i for i in every if i == index]
        else:
            found = [g["index"] for g in gpus if g["uuid"] and g["uuid"].lower() == text.lower()]
            if not found and len(text) >= 8:
                found = [g["index"] for g in gpus if g["uuid"] and g["uuid"].lower().startswith(text.lower())]
        if len(found) != 1:
            raise GpuStateError(
                "bad_input",
                f"gpu_devices names {item!r}, which is not one GPU of this node: it has {known}. Use indexes or "
                "UUIDs from that list (nvidia-smi -L), or leave gpu_devices empty for every GPU.",
            )
        if found[0] not in chosen:
            chosen.append(found[0])
    return sorted(chosen)


def read_state(backend: Backend, device_glob: str, idle_mib: int | None = None, table=None, devices=None,
               gpus=None) -> dict:
    """The gpu_state facts: GPUs (memory, compute processes) and the holders of the nodes.

    ``devices`` (indexes or UUIDs) names the target GPUs: ``clean`` and ``dirty_gpus`` cover
    exactly those; every GPU is still listed.
    """
    gpus = backend.read_gpus() if gpus is None else gpus
    targets = resolve_devices(gpus, devices)
    hidden = backend.hidden_pids()
    table = proc_table.snapshot() if table is None else table
    nodes = proc_table.expand_nodes(device_glob)
    held = proc_table.holders(nodes, table)
    holders = [holder_record(table[pid], held[pid], backend) for pid in sorted(held) if pid not in hidden]
    for gpu in gpus:
        for proc in gpu["processes"]:
            info = table.get(proc["pid"])
            proc["name"] = info.comm if info else None
            proc["cmdline"] = info.command if info else None
            proc["user"] = info.user if info else None
    state = {
        "backend": backend.name,
        "driver_version": backend.driver_version,
        "device_glob": device_glob,
        "nodes": nodes,
        "gpus": gpus,
        "targets": targets,
        "holders": holders,
    }
    if idle_mib is not None:
        state["idle_mib"] = idle_mib
        state["dirty_gpus"] = [g["index"] for g in gpus if g["index"] in targets and is_dirty(g, idle_mib)]
        state["clean"] = not state["dirty_gpus"]
    return state


def is_dirty(gpu: dict, idle_mib: int) -> bool:
    used = gpu.get("memory_used_mib")
    return bool(gpu.get("processes")) or used is None or used > idle_mib

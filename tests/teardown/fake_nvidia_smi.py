"""A stand-in for nvidia-smi over an emulated device folder, for the nvidia-smi backend tests.

Answers the two CSV queries the backend (and SGLang's killall) uses,

    --query-gpu=index,uuid,name,memory.used,memory.total,memory.reserved,driver_version
    --query-compute-apps=pid,used_memory,gpu_uuid,process_name
    --format=csv,noheader,nounits

from the live holders of the folder, through the emulator's own reference reader
(sglang_emulator.gpus.read_state: a record counts while its process is alive and holds
the GPU's node), so its output follows the processes exactly as the real one follows the
driver. FAKE_NVSMI_DEVICE_DIR names the folder; FAKE_NVSMI_FAIL makes it fail the way the
real one does: driver (module not loaded), mismatch (user-space/kernel versions differ),
nogpu, nolib, old (an nvidia-smi without the memory.reserved field).
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "files"))

from sglang_emulator import gpus  # noqa: E402

FAILURES = {
    "driver": (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
                  "that the latest NVIDIA driver is installed and running.\n"),
    "mismatch": (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 590.48\n"),
    "nogpu": (6, "No devices were found\n"),
    "nolib": (12, "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the "
              "NVIDIA Display Driver is properly installed and present in your system.\nPlease also try adding "
              "directory that contains libnvidia-ml.so to your system PATH.\n"),
}


def bus_id(index: int) -> str:
    return f"00000000:{0x18 + index:02X}:00.0"


def query(state: dict, fail: str) -> int:
    """``nvidia-smi -q``, the part of its layout the backend reads."""
    out = ["", "==============NVSMI LOG==============", "", f"{'Driver Version':42}: {state['driver_version']}",
           "", f"{'Attached GPUs':42}: {len(state['gpus'])}"]
    for g in state["gpus"]:
        minor = "N/A" if fail == "nominor" else g["node"].replace("nvidia", "")
        out += [f"GPU {bus_id(g['index'])}", f"    {'Product Name':38}: {g['name']}",
                f"    {'GPU UUID':38}: {g['uuid']}", f"    {'Minor Number':38}: {minor}", "    Processes"]
        for p in g["processes"]:
            out += [f"        {'GPU instance ID':34}: N/A", f"        {'Compute instance ID':34}: N/A",
                    f"        {'Process ID':34}: {p['pid']}",
                    f"            {'Type':30}: {'G' if p.get('type') == 'graphics' else 'C'}",
                    f"            {'Name':30}: {p['name']}",
                    f"            {'Used GPU Memory':30}: {p['used_memory_mib']} MiB"]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def main(argv: list[str]) -> int:
    fail = os.environ.get("FAKE_NVSMI_FAIL", "")
    if fail in FAILURES:
        code, text = FAILURES[fail]
        sys.stdout.write(text)
        return code
    if argv[:1] == ["-q"]:
        return query(gpus.read_state(os.environ["FAKE_NVSMI_DEVICE_DIR"]), fail)
    opts = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    if opts.get("--format") != "csv,noheader,nounits":
        sys.stdout.write("This fake answers --format=csv,noheader,nounits queries only.\n")
        return 2
    state = gpus.read_state(os.environ["FAKE_NVSMI_DEVICE_DIR"])
    if "--query-gpu" in opts:
        fields = opts["--query-gpu"].split(",")
        if fail == "old" and "memory.reserved" in fields:
            sys.stdout.write('Field "memory.reserved" is not a valid field to query.\n\n')
            return 2
        for g in state["gpus"]:
            values = {
                "index": g["index"], "uuid": g["uuid"], "name": g["name"],
                "memory.used": g["memory_used_mib"], "memory.total": g["memory_total_mib"],
                "memory.reserved": g["memory_reserved_mib"], "driver_version": state["driver_version"],
                "pci.bus_id": bus_id(g["index"]),
            }
            sys.stdout.write(", ".join(str(values[f]) for f in fields) + "\n")
        return 0
    if "--query-compute-apps" in opts:
        fields = opts["--query-compute-apps"].split(",")
        for g in state["gpus"]:
            for p in g["processes"]:
                if p.get("type") == "graphics":
                    continue  # --query-compute-apps lists compute processes only
                values = {"pid": p["pid"], "used_memory": p["used_memory_mib"], "gpu_uuid": g["uuid"],
                          "process_name": p["name"]}
                sys.stdout.write(", ".join(str(values[f]) for f in fields) + "\n")
        return 0
    sys.stdout.write("This fake answers --query-gpu and --query-compute-apps only.\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

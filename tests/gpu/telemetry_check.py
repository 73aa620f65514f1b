"""GPU telemetry on a real GPU, part of tests/gpu/run_on_gpu.sh: a real process loads one GPU (libcuda through
ctypes, no torch: memory allocated and written over and over), the collection's own telemetry reader
(plugins/module_utils/specbench_client/telemetry.py, NVML through nvidia-ml-py) finds that GPU from the
process NVML lists on it (pick_gpus, as it finds a server's GPUs) and samples it through a window; the NVML
energy counter over the window must agree with the power samples integrated, within NVML's stated power
accuracy (+-5 W) over the window plus, at each edge, what a 1-s averaged power reading can lag by.

    python telemetry_check.py --gpu 0 --seconds 12 [--gib 2] [--interval 0.1]

Prints one line, ``telemetry: ok ...``, ``telemetry: FAILED ...`` or ``telemetry: NOT RUN ...``; exits 0, 1 or 2.
Ends only the process it started. Standard library plus nvidia-ml-py (module pynvml).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TELEMETRY = ROOT / "plugins" / "module_utils" / "specbench_client" / "telemetry.py"
NVML_ACCURACY_W = 5.0  # NVML's stated power accuracy (nvmlDeviceGetPowerUsage: +-5 W)
POWER_AVERAGE_S = 1.0  # the power reading is a 1-s average on recent GPUs: it lags each edge by up to that

LOADER = r"""
import ctypes, os, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
def ok(rc, what):
    if rc:
        print("ERR %s failed (%d)" % (what, rc), flush=True)
        sys.exit(3)
ok(cuda.cuInit(0), "cuInit")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
ok(cuda.cuDeviceGet(ctypes.byref(dev), int(sys.argv[1])), "cuDeviceGet")
ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
size = ctypes.c_size_t(int(float(sys.argv[2]) * (1 << 30)))
ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), size), "cuMemAlloc")
end = time.monotonic() + float(sys.argv[3])
first = True
while time.monotonic() < end:
    ok(cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(1), size), "cuMemsetD8")
    ok(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    if first:
        print("READY", os.getpid(), flush=True)
        first = False
"""


def tolerance_j(gpu: dict, window_s: float) -> float:
    """How far the counter's joules and the integrated power samples may differ over a window: NVML's power
    accuracy over the window plus, at each edge, the samples' power swing over one averaging period."""
    swing = (gpu.get("power_w_max") or 0.0) - (gpu.get("power_w_min") or 0.0)
    return NVML_ACCURACY_W * window_s + 2 * swing * POWER_AVERAGE_S


def energy_verdict(window: dict, idle_w: float | None = None) -> tuple[bool | None, str]:
    """(passed, words) for one telemetry window of one GPU: None when it cannot be checked (no counter)."""
    gpu = (window.get("gpus") or [{}])[0]
    if gpu.get("energy_source") != "counter" or gpu.get("power_integrated_j") is None:
        return None, f"GPU {gpu.get('index')}: no energy counter here (integrated power only): nothing to check against"
    tol = tolerance_j(gpu, window["window_s"])
    diff = gpu["energy_j"] - gpu["power_integrated_j"]
    words = (f"GPU {gpu['index']} over {window['window_s']:.1f} s: counter {gpu['energy_j']:.1f} J, integrated power "
             f"{gpu['power_integrated_j']:.1f} J (difference {diff:+.1f} J, tolerance {tol:.1f} J), mean "
             f"{gpu['power_w_mean']:.0f} W" + (f" against {idle_w:.0f} W idle" if idle_w is not None else ""))
    if abs(diff) > tol:
        return False, "the energy counter disagrees with the power samples: " + words
    if idle_w is not None and gpu["power_w_mean"] < idle_w + 10.0:
        return False, "the loader did not load the GPU (power within 10 W of idle): " + words
    return True, words


def load_telemetry():
    spec = importlib.util.spec_from_file_location("specbench_telemetry", TELEMETRY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--interval", type=float, default=0.1)
    args = ap.parse_args()
    tl = load_telemetry()
    try:
        reader = tl.NvmlReader()
    except tl.TelemetryError as exc:
        print(f"telemetry: NOT RUN: {exc}")
        return 2
    if args.gpu >= reader.count:
        print(f"telemetry: NOT RUN: NVML lists {reader.count} GPU(s), not GPU {args.gpu}")
        return 2
    reader.select([args.gpu], "asked")
    idle_w = reader.read()[0]["power_w"]
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    loader = subprocess.Popen([sys.executable, "-c", LOADER, str(args.gpu), str(args.gib), str(args.seconds + 6)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        line = loader.stdout.readline().split()
        if not line or line[0] != "READY":
            print(f"telemetry: FAILED: the loader did not start ({' '.join(line)} {loader.stderr.read()[-300:]})")
            return 1
        uuids, holders = reader.node_view()
        found, how = tl.pick_gpus(reader.count, {"pids": [loader.pid]}, {}, uuids, holders)
        if "NVML lists" in how and found != [args.gpu]:
            print(f"telemetry: FAILED: the loader runs on GPU {args.gpu} but NVML lists it on {found}")
            return 1
        note = "" if "NVML lists" in how else "; NVML lists no process of the loader (another pid namespace?)"
        reader.select([args.gpu], how if not note else "asked", uuids)
        start = time.monotonic()
        sampler = tl.TelemetrySampler(reader, args.interval, start)
        sampler.start()
        ws = start + 1.0
        we = ws + args.seconds
        time.sleep(max(0.0, we + 0.5 - time.monotonic()))
        sampler.halt.set()
        sampler.join()
        window = sampler.over_window(ws, we)
    finally:
        if loader.poll() is None:
            loader.kill()  # only the process this check started
        loader.wait()
        reader.close()
    if not window or window.get("error"):
        print(f"telemetry: FAILED: no window from the samples ({(window or {}).get('error')})")
        return 1
    passed, words = energy_verdict(window, idle_w)
    uuid = (window.get("gpus_read") or {}).get("uuids") or ["?"]
    if passed is None:
        print(f"telemetry: ok (not checked: {words}){note}")
        return 0
    print(f"telemetry: {'ok' if passed else 'FAILED'}: {words}; read {uuid[0]} ({how}){note}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

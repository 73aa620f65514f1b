#!/usr/bin/env python
"""The teardown on a real NVIDIA machine: allocate, read, tear down, prove idle, time it.

    .venv/bin/python tests/gpu/real_gpu_teardown.py [--gib 4] [--gpu 0] [--stubborn] [--playbook]

1. Reads every GPU (gpu_state, backend auto: NVML v2, else nvidia-smi) for the idle baseline.
2. Starts a child in its own session (outside this script's process tree) that allocates
   --gib GiB on --gpu with torch (or cupy) and holds it; --stubborn makes it ignore SIGTERM.
3. Reads the GPUs again: the memory and the child as a compute process must show.
4. Tears down (the module's code in-process, or with --playbook through
   ansible-playbook playbooks/teardown.yml -e engine=sglang) with the child's process group
   recorded and a kill pattern unique to this run.
5. Checks every GPU is back at or under the idle threshold and prints how long it took.

The device-holder step acts on /dev/nvidia*: the script refuses to run while any process
other than its own child, this script and the never-kill list holds those nodes, unless
--i-own-this-machine is given. Not collected by pytest (no GPU in CI); run it wherever an
NVIDIA GPU is at hand.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "collections"))

from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state, proc_table  # noqa: E402
from ansible_collections.specbench.core.plugins.module_utils.teardown import sequence as gpu_teardown  # noqa: E402

CHILD = r"""
import os, signal, sys, time
gib, gpu, stubborn, tag = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
if stubborn:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
try:
    import torch
    torch.cuda.set_device(gpu)
    block = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    lib = "torch " + torch.__version__
except ImportError:
    import cupy
    cupy.cuda.Device(gpu).use()
    block = cupy.empty(int(gib * (1 << 30)), dtype=cupy.uint8)
    cupy.cuda.Stream.null.synchronize()
    lib = "cupy " + cupy.__version__
print("READY", os.getpid(), lib, flush=True)
while True:
    time.sleep(3600)
"""


def read(glob: str, idle: int) -> dict:
    backend = gpu_state.open_backend("auto", glob)
    try:
        return gpu_state.read_state(backend, glob, idle)
    finally:
        backend.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--gib", type=float, default=4.0, help="GiB to allocate in the child (default 4)")
    p.add_argument("--gpu", type=int, default=0, help="GPU index for the child (default 0)")
    p.add_argument("--idle-mib", type=int, default=64, help="clean threshold in MiB (default 64)")
    p.add_argument("--stubborn", action="store_true", help="the child ignores SIGTERM (SIGKILL path)")
    p.add_argument("--playbook", action="store_true", help="tear down through ansible-playbook playbooks/teardown.yml")
    p.add_argument("--i-own-this-machine", action="store_true", help="run even if other processes hold /dev/nvidia*")
    args = p.parse_args()
    glob = "/dev/nvidia*"

    try:
        before = read(glob, args.idle_mib)
    except gpu_state.GpuStateError as exc:
        print(f"cannot read the GPUs ({exc.kind}): {exc}", file=sys.stderr)
        return 2
    table = proc_table.snapshot()
    mine = gpu_teardown.protected(table)
    others = [h for h in before["holders"] if h["pid"] not in mine
              and not gpu_teardown.never_kill_match(table[h["pid"]], gpu_teardown.DEFAULT_NEVER_KILL)]
    if (others or not before["clean"]) and not args.i_own_this_machine:
        print("other processes hold the GPUs or they are not idle; the device-holder step would kill them:",
              file=sys.stderr)
        for h in others:
            print(f"  pid {h['pid']} {h['cmdline'][:120]}", file=sys.stderr)
        print("free the machine or pass --i-own-this-machine", file=sys.stderr)
        return 3

    tag = f"specbench-gpu-check-{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    launcher = subprocess.Popen(
        ["setsid", "-f", sys.executable, "-c", CHILD, str(args.gib), str(args.gpu), "1" if args.stubborn else "0", tag],
        stdout=subprocess.PIPE,
    )
    line = launcher.stdout.readline().decode().split()
    launcher.wait()
    if not line or line[0] != "READY":
        print("the child could not allocate (is torch or cupy with CUDA installed?)", file=sys.stderr)
        return 2
    child = int(line[1])
    alloc_s = time.monotonic() - started
    loaded = read(glob, args.idle_mib)
    gpu = loaded["gpus"][args.gpu]
    listed = [q["pid"] for q in gpu["processes"]]
    print(f"child {child} ({' '.join(line[2:])}) holds {gpu['memory_used_mib']} MiB on GPU {args.gpu} "
          f"(idle before: {before['gpus'][args.gpu]['memory_used_mib']} MiB; listed: {listed}; "
          f"backend {loaded['backend']}, driver {loaded['driver_version']}; allocation took {alloc_s:.2f} s)")

    t0 = time.monotonic()
    if args.playbook:
        extra = {"engine": "sglang", "gpu_kill_patterns": [re.escape(tag)], "gpu_idle_mib": args.idle_mib,
                 "specbench_server": {"pid": child, "pgid": child}, "gpu_term_timeout_s": 5}
        run = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "playbooks/teardown.yml",
             "-e", json.dumps(extra)],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )
        print(run.stdout[-1500:])
        ok = run.returncode == 0
        # The playbook's report task says it: "... time to clean 0.0104 s" (playbooks/teardown.yml).
        said = re.search(r"time to clean ([0-9.]+) s", run.stdout)
        ttc = float(said.group(1)) if said else None
    else:
        backend = gpu_state.open_backend("auto", glob)
        try:
            result = gpu_teardown.Teardown(backend, glob, idle_mib=args.idle_mib, kill_patterns=[re.escape(tag)],
                                           server_pgid=child, term_timeout_s=5).run()
        finally:
            backend.close()
        ok = result["clean"]
        ttc = result["time_to_clean_s"]
        print(result["msg"])
        for k in result["killed"]:
            print(f"  killed pid {k['pid']} with {k['signals']} ({k['step']})")
    total = time.monotonic() - t0
    after = read(glob, args.idle_mib)
    used = [g["memory_used_mib"] for g in after["gpus"]]
    print(f"teardown {'CLEAN' if ok and after['clean'] else 'NOT CLEAN'}: {total:.3f} s in all, "
          f"time to clean after the last exit {ttc if ttc is not None else 'n/a'} s; used now {used} MiB")
    if proc_table.alive(child):
        print(f"child {child} survived", file=sys.stderr)
        return 1
    return 0 if ok and after["clean"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Time-to-clean of the GPU teardown, on emulated GPUs (a device folder this script makes).

Prints, in one run:

1. Detection latency: the last holder of every GPU exits at T0 (this script SIGKILLs it);
   the teardown's poll loop (gpu_teardown.Teardown.wait_clean, default interval) reports
   every GPU clean at T1. Figures are T1 - T0 over many rounds. Target: under 0.5 s.
2. A whole teardown of a server tree (server + one worker per GPU, all answering SIGTERM):
   wall time and time_to_clean_s as the module reports them, with the default settle interval
   (gpu_settle_s: clean must hold that long, re-walking the tree each poll) and with none, so
   the settle interval's cost shows on its own.
3. The seeds' way on the same tree: `fuser -k` on the nodes, `sleep 1`, one read of the GPUs
   (which the seeds did not even do for every GPU), and the ratio to (2).

Run: .venv/bin/python benchmarks/teardown_time_to_clean.py [--rounds 20] [--gpus 8]
Only processes this script started are ever signalled: the teardown runs with its default
scope (own: the recorded server tree, and this user's holders of GPU memory on the script's
own emulated GPUs), the device glob is the script's scratch folder, and the kill patterns
need that folder on the command line. All figures are on emulated GPUs (a device folder and
memory records), not real ones: they measure the teardown's own latency, not the driver's.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "collections"))
sys.path.insert(0, os.path.join(ROOT, "files"))

from ansible_collections.specbench.core.plugins.module_utils.teardown import (
    gpu_state,
    proc_table,  # noqa: E402
)
from ansible_collections.specbench.core.plugins.module_utils.teardown import sequence as gpu_teardown
from sglang_emulator import gpus  # noqa: E402

SETTLE = "settle_s" in gpu_teardown.Teardown.__init__.__code__.co_varnames  # absent before issue 19

HOLDER = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from sglang_emulator import gpus
dev, gpu, mib = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
nodes = ["nvidiactl", "nvidia-uvm"] + ([f"nvidia{gpu}"] if gpu >= 0 else [])
fds = [os.open(os.path.join(dev, n), os.O_RDWR) for n in nodes]
if gpu >= 0:
    gpus.write_record(dev, "sglang::bench", {gpu: mib})
print("READY", os.getpid(), flush=True)
while True:
    signal.pause()
"""


class Bench:
    def __init__(self, gpu_count: int):
        self.scratch = tempfile.mkdtemp(prefix="specbench-teardown-bench-")
        self.dev = os.path.join(self.scratch, "dev")
        self.glob = f"{self.dev}/nvidia*"
        gpus.ensure_device_dir(self.dev, gpu_count, "NVIDIA H200", 143771)
        self.gpu_count = gpu_count
        self.pids: list[int] = []

    def holder(self, gpu: int, mib: int = 20000) -> int:
        """A holder outside this process's tree (setsid -f), so the teardown may signal it."""
        proc = subprocess.Popen(
            ["setsid", "-f", sys.executable, "-c", HOLDER, os.path.join(ROOT, "files"), self.dev, str(gpu),
             str(mib), self.scratch],
            stdout=subprocess.PIPE,
        )
        line = proc.stdout.readline().split()
        proc.stdout.close()
        proc.wait()
        pid = int(line[1])
        self.pids.append(pid)
        return pid

    def server_tree(self) -> dict:
        """A server (no memory, its own session) and one worker per GPU; the server's record."""
        server = self.holder(-1)
        for g in range(self.gpu_count):
            self.holder(g)
        return {"pid": server, "pgid": server, "sid": server, "starttime": proc_table.starttime(server)}

    def teardown(self, **kw) -> gpu_teardown.Teardown:
        backend = gpu_state.open_backend("emulated", self.glob)
        patterns = [{"comm": "^python", "args": re.escape(self.scratch)}]
        return gpu_teardown.Teardown(backend, self.glob, kill_patterns=patterns, **kw)

    def close(self) -> None:
        for pid in self.pids:
            try:
                if self.scratch in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"):
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.scratch, ignore_errors=True)


def detection_latency(bench: Bench, rounds: int) -> list[float]:
    """T1 - T0: the last holder dies at T0, the poll loop sees every GPU clean at T1."""
    latencies = []
    for _unused in range(rounds):
        pids = [bench.holder(g) for g in range(bench.gpu_count)]
        td = bench.teardown()
        t0 = {}

        def kill_last(pids, t0):
            time.sleep(0.12)  # let the poll loop run a few rounds on dirty GPUs first
            for pid in pids[:-1]:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.03)
            t0["at"] = time.monotonic()
            os.kill(pids[-1], signal.SIGKILL)

        killer = threading.Thread(target=kill_last, args=(pids, t0))
        killer.start()
        # the poll loop alone: no re-walk (this script kills the holders); the first clean read of
        # the clean stretch is what it returns, the settle interval after it is not counted here
        clean_at = td.wait_clean(time.monotonic() + 10, rewalk=False)
        killer.join()
        assert clean_at is not None, "never clean"
        latencies.append(clean_at - t0["at"])
    return latencies


def whole_teardown(bench: Bench, **kw) -> dict:
    record = bench.server_tree()
    start = time.monotonic()
    result = bench.teardown(server_record=record, **kw).run()
    wall = time.monotonic() - start
    assert result["clean"], result["msg"]
    return {"wall_s": wall, "time_to_clean_s": result["time_to_clean_s"], "killed": len(result["killed"])}


def seeds_way(bench: Bench) -> dict:
    bench.server_tree()
    nodes = sorted(os.path.join(bench.dev, n) for n in os.listdir(bench.dev) if n.startswith("nvidia"))
    start = time.monotonic()
    subprocess.run(["fuser", "-k", *nodes], capture_output=True, check=False)
    time.sleep(1)  # the seeds' fixed sleep
    used = [g["memory_used_mib"] for g in gpus.read_state(bench.dev)["gpus"]]
    return {"wall_s": time.monotonic() - start, "used": used}


def bench_settle() -> float:
    return gpu_teardown.Teardown.__init__.__kwdefaults__["settle_s"]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=20, help="detection-latency rounds (default 20)")
    parser.add_argument("--gpus", type=int, default=8, help="emulated GPUs (default 8, the seeds' node)")
    args = parser.parse_args()
    if not shutil.which("fuser"):
        print("fuser (psmisc) is needed for the seeds' comparison: apt-get install psmisc", file=sys.stderr)
        return 2
    bench = Bench(args.gpus)
    try:
        interval = bench.teardown().poll_interval
        lat = detection_latency(bench, args.rounds)
        whole = [whole_teardown(bench) for _unused in range(5)]
        unsettled = [whole_teardown(bench, settle_s=0) for _unused in range(5)] if SETTLE else []
        seeds = seeds_way(bench)
    finally:
        bench.close()
    print(f"teardown time-to-clean on {args.gpus} EMULATED GPUs (not real ones), poll interval {interval} s "
          "(the default), scope own")
    print(f"  detection after the last holder exits, {args.rounds} rounds:")
    print(f"    median {statistics.median(lat) * 1000:7.1f} ms   p95 {pct(lat, 0.95) * 1000:7.1f} ms   "
          f"max {max(lat) * 1000:7.1f} ms   target < 500 ms: {'met' if max(lat) < 0.5 else 'MISSED'}")
    walls = [w["wall_s"] for w in whole]
    ttc = [w["time_to_clean_s"] for w in whole]
    print(f"  whole teardown of a server tree ({whole[0]['killed']} processes, SIGTERM honoured), 5 runs:")
    print(f"    wall median {statistics.median(walls) * 1000:7.1f} ms   max {max(walls) * 1000:7.1f} ms   "
          f"time_to_clean_s median {statistics.median(ttc) * 1000:6.2f} ms")
    if unsettled:
        bare = [w["wall_s"] for w in unsettled]
        settle = bench_settle()
        print(f"    with gpu_settle_s {settle} s (the default); with 0: wall median "
              f"{statistics.median(bare) * 1000:7.1f} ms, so the settle interval costs "
              f"{(statistics.median(walls) - statistics.median(bare)) * 1000:6.1f} ms")
    print("  the seeds' way (fuser -k; sleep 1; one read):")
    print(f"    wall {seeds['wall_s'] * 1000:7.1f} ms   used after {seeds['used']} MiB")
    print(f"  ratio seeds / teardown (wall, median): {seeds['wall_s'] / statistics.median(walls):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

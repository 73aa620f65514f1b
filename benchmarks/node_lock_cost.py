"""What the node lock costs a playbook run, and how soon a queued job gets the lock.

Prints, in one run (this machine, a real ansible-playbook through ansible-runner, local
connection, an empty node folder: nothing is launched or killed):

1. The two lock tasks of playbooks/teardown.yml (the token's set_fact and the node_lock module),
   as the job events time them, against the whole playbook's wall time, over --rounds runs:
   median and max seconds, and the share of the playbook.
2. Hand-over latency, module_utils only: job A's holder process (standing for its
   ansible-playbook) is SIGKILLed at T0; job B, waiting in acquire(), holds the lock at T1.
   Figures are T1 - T0 over --rounds rounds; bound: the keeper's poll (0.2 s) plus B's poll (0.2 s).

Run: .venv/bin/python benchmarks/node_lock_cost.py [--rounds 5]
All figures are computed on this machine (CPU only); none is from a GPU.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "collections"), str(ROOT / "tests")]

from ansible_collections.specbench.core.plugins.module_utils.node import lock  # noqa: E402


def playbook_cost(rounds: int, folder: Path) -> None:
    import specbench_testkit as kit  # noqa: PLC0415

    lock_s, wall_s = [], []
    for i in range(rounds):
        node = folder / f"node-{i}"
        started = time.monotonic()
        run = kit.run_playbook(folder, "playbooks/teardown.yml", None,
                               {"specbench_node_dir": str(node), "engine": "emulator"}, name=f"runner-{i}")
        wall_s.append(time.monotonic() - started)
        assert run.rc == 0, run.stdout[-3000:]
        durations = [e["event_data"] for e in run.events if e.get("event") in ("runner_on_ok", "runner_on_skipped")
                     and ("lock token" in e["event_data"].get("task", "") or "Hold the node lock" in
                          e["event_data"].get("task", ""))]
        spent = sum(float(d.get("duration") or 0) for d in durations)
        lock_s.append(spent)
    print(f"1. lock tasks per playbook run ({rounds} runs of playbooks/teardown.yml, computed here): "
          f"median {statistics.median(lock_s):.3f} s, max {max(lock_s):.3f} s; whole playbook median "
          f"{statistics.median(wall_s):.2f} s; share {statistics.median(lock_s) / statistics.median(wall_s):.1%}")


def handover(rounds: int, folder: Path) -> None:
    gaps = []
    for i in range(rounds):
        path = str(folder / f"h{i}" / "node.lock")
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        watch = {"pid": holder.pid, "starttime": lock.starttime(holder.pid), "what": "bench holder"}
        lock.acquire(path, "a", {"run_id": "A"}, wait_s=0, watch=watch)
        waiter = subprocess.Popen([sys.executable, "-c", (
            "import sys, time; sys.path[:0] = [sys.argv[1]]\n"
            "from ansible_collections.specbench.core.plugins.module_utils.node import lock\n"
            "print('WAITING', flush=True)\n"
            f"lock.acquire({path!r}, 'b', {{}}, wait_s=30, watch={{'pid': None}}, max_hold_s=0.5)\n"
            "print(time.monotonic(), flush=True)"), str(ROOT / "collections")], stdout=subprocess.PIPE, text=True)
        assert waiter.stdout.readline().strip() == "WAITING"
        time.sleep(0.3)
        t0 = time.monotonic()
        holder.kill()
        holder.wait()
        t1 = float(waiter.stdout.readline())
        waiter.wait()
        gaps.append(t1 - t0)
    print(f"2. hand-over after the holder dies ({rounds} rounds, computed here): median {statistics.median(gaps):.3f} s, "
          f"max {max(gaps):.3f} s (bound: keeper poll 0.2 s + waiter poll 0.2 s = 0.4 s, plus scheduling)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="specbench-lock-") as tmp:
        handover(args.rounds, Path(tmp))
        playbook_cost(args.rounds, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())

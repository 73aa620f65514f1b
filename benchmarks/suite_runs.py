"""Where the test suite's playbook time goes: reads the JSON lines that tests/specbench_testkit.py
writes for every playbook run when SPECBENCH_RUN_LOG names a file, and prints per test file the
runs, wall and CPU seconds, tasks and module runs, largest first, with the totals.

    SPECBENCH_RUN_LOG=/tmp/runs.jsonl tests/run --pytest
    .venv/bin/python benchmarks/suite_runs.py /tmp/runs.jsonl [--by test]

CPU seconds are ansible-playbook's and its children's (the modules, and the clients they run);
a server a playbook launched in its own session (the emulator, vLLM) is not counted there.
Figures from one run on one machine: compare files within a run, not runs on different machines.
"""
from __future__ import annotations

import argparse
import collections
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("log")
    parser.add_argument("--by", choices=("file", "test"), default="file")
    args = parser.parse_args()
    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    with open(args.log, encoding="utf-8") as handle:
        for line in handle:
            run = json.loads(line)
            key = run["test"] if args.by == "test" else run["test"].split("::", 1)[0]
            row = rows[key or "(outside a test)"]
            row["runs"] += 1
            for field in ("wall_s", "cpu_s", "tasks", "module_runs"):
                row[field] += run[field]
    total = sum(rows.values(), collections.Counter())
    print(f"{'runs':>5} {'wall s':>8} {'CPU s':>8} {'tasks':>6} {'modules':>7}  {args.by}")
    for key, row in sorted(rows.items(), key=lambda kv: -kv[1]["wall_s"]):
        print(f"{row['runs']:5d} {row['wall_s']:8.0f} {row['cpu_s']:8.0f} {row['tasks']:6d} {row['module_runs']:7d}  {key}")
    print(f"{total['runs']:5d} {total['wall_s']:8.0f} {total['cpu_s']:8.0f} {total['tasks']:6d} {total['module_runs']:7d}  total")


if __name__ == "__main__":
    main()

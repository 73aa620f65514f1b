"""What a sweep will ask of the emulator, from its own model (emulator-only; SGLang has no such tool).

``python3 <emulator folder>/plan.py --levels 1,2,5 --input-len 256 --output-len 256 -- <launch flags>``
prints one JSON object: per level the node's output tok/s and scheduler steps per second at the
model's steady state (model.steady_state, with the launch flags resolved as the server resolves
them), and the peaks over the levels. At time scale ``s`` the machine must serve the peak divided
by ``s`` in wall-clock time: the collection picks the scale from that and the measured capacity of
the emulator and the client (plugins/module_utils/engines/emulator_scale.py). Exit 1 with the reason on a
launch the server would refuse.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sglang_emulator import cli, model  # noqa: E402


def plan(levels: list[int], input_len: int, output_len: int, launch: list[str]) -> dict:
    args = cli.build_parser().parse_args(launch)
    args.emulator_device_dir = None  # only the model is asked: no GPUs to check
    cfg = cli.resolve(args)
    rows = []
    for conc in levels:
        truth = model.steady_state(cfg["costs"], cfg["spec"], conc, input_len, output_len,
                                   cfg["max_running_requests"], cfg["kv_capacity_tokens"])
        rows.append({"concurrency": conc, "node_output_tok_per_s": round(truth["output_tok_per_s"], 3),
                     "node_steps_per_s": round(1.0 / truth["step_s"], 3),
                     "node_request_per_s": round(truth["request_per_s"], 4)})
    return {"profile": cfg["profile_name"], "levels": rows,
            "peak_node_output_tok_per_s": max(r["node_output_tok_per_s"] for r in rows),
            "peak_node_steps_per_s": max(r["node_steps_per_s"] for r in rows),
            "source": "the emulator's analytic model (files/sglang_emulator/model.py), node speed"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, launch = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(prog="plan.py", description="the emulator's model over a sweep's levels")
    p.add_argument("--levels", required=True, help="concurrency levels, comma-separated")
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=256)
    ns = p.parse_args(own)
    try:
        levels = [int(x) for x in ns.levels.replace(" ", "").strip("[]").split(",") if x]
        result = plan(levels, ns.input_len, ns.output_len, launch)
    except (ValueError, cli.StartupError) as exc:
        print(f"plan.py: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The emulator's time scale this machine can sustain for the levels asked (``time_scale: auto``).

At time scale ``s`` the emulator serves the node's tokens ``1 / s`` times faster, so the machine
must carry ``peak node tok/s / s`` wall-clock tokens per second through two processes: the
emulator (one process: its scheduler, its SSE writes) and the benchmark client (it reads and
stamps every chunk). Each costs CPU per token; a process that needs more than ``headroom`` of
one core falls behind its schedule (the emulator) or stamps late (the client), and the levels
measure the machine, not the node. So ``s`` is the smallest scale, no faster than ``fastest``,
at which both stay under the headroom:

    s = max(fastest, peak / (headroom * emulator_tok_per_cpu_s), peak / (headroom * client_tok_per_cpu_s))

rounded up to two significant digits. The capacities are measured (the role's defaults cite the
benchmark and machine they come from); the peak comes from the emulator's own model over the
levels (files/sglang_emulator/plan.py).
"""
from __future__ import annotations

import math


def round_up(value: float, digits: int = 2) -> float:
    """``value`` rounded up to ``digits`` significant digits (0.0634 -> 0.064)."""
    if value <= 0:
        return value
    step = 10 ** (math.floor(math.log10(value)) - digits + 1)
    return round(math.ceil(value / step - 1e-9) * step, 12)


def choose_time_scale(plan: dict, emulator_tok_per_cpu_s: float, client_tok_per_cpu_s: float,
                      headroom: float = 0.5, fastest: float = 0.1) -> dict:
    """``{"time_scale", "peak_node_tok_per_s", "peak_wall_tok_per_s", "emulator_core", "client_core", "text"}``."""
    for name, value in (("emulator_tok_per_cpu_s", emulator_tok_per_cpu_s), ("client_tok_per_cpu_s", client_tok_per_cpu_s),
                        ("headroom", headroom), ("fastest", fastest)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} is {value!r}: give a positive number")
    peak = float(plan["peak_node_output_tok_per_s"])
    need = max(fastest, peak / (headroom * emulator_tok_per_cpu_s), peak / (headroom * client_tok_per_cpu_s))
    scale = round_up(need)
    wall = peak / scale
    emulator_core, client_core = wall / emulator_tok_per_cpu_s, wall / client_tok_per_cpu_s
    peak_level = max(plan["levels"], key=lambda r: r["node_output_tok_per_s"])["concurrency"]
    text = (f"time scale {scale:g}: the emulator's model peaks at {peak:.0f} node tok/s (C={peak_level}, "
            f"profile {plan.get('profile')}), {wall:.0f} tok/s wall-clock at this scale, about "
            f"{100 * emulator_core:.0f}% of a core for the emulator ({emulator_tok_per_cpu_s:g} tok per CPU-s) and "
            f"{100 * client_core:.0f}% for the client ({client_tok_per_cpu_s:g} tok per CPU-s), each under "
            f"{100 * headroom:.0f}%" + (f"; never faster than {fastest:g}" if scale == round_up(fastest) else ""))
    return {"time_scale": scale, "peak_node_tok_per_s": round(peak, 3), "peak_wall_tok_per_s": round(wall, 1),
            "emulator_core": round(emulator_core, 3), "client_core": round(client_core, 3), "text": text}

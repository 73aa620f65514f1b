# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Honest labels: which engine served, and throughput at the emulated node's own speed.

The one place the emulator's time scale is turned into node speed. The emulator runs every
modelled duration times ``time_scale`` (0.1: ten times faster than the node it emulates), so a
wall-clock 921 tok/s at time scale 0.1 is the node's 92.1 tok/s, and a wall-clock TTFT of 4 ms
the node's 40 ms. ``level_at_node_speed`` converts a measured level once, where it is made
(specbench_client.level.run_level): every figure a person or a program reads is then the node's,
the wall-clock ones stay beside them as ``wall_clock_<name>``.
"""
from __future__ import annotations

EMULATOR_MARK = "+specbench-emulator"


def emulation(server: dict | None) -> dict | None:
    """``{"time_scale": x}`` when ``server`` (a results file's ``server`` block or the
    specbench_server fact) ran on the emulator, else None. ``x`` is None when the server is the
    emulator but its time scale is not recorded (engine=external): figures stay wall-clock."""
    server = server or {}
    info = server.get("server_info") if isinstance(server.get("server_info"), dict) else {}
    emu = info.get("emulator") or server.get("emulator")
    version = str(server.get("version") or info.get("version") or "")
    if not emu and EMULATOR_MARK not in version and server.get("engine") != "emulator":
        return None
    scale = (emu or {}).get("time_scale") if isinstance(emu, dict) else None
    try:
        scale = float(scale) if scale is not None else None
    except (TypeError, ValueError):
        scale = None
    return {"time_scale": scale}


def node_speed(tok_per_s, time_scale: float):
    """Wall-clock tok/s on the emulator -> the emulated node's tok/s (None stays None)."""
    return None if tok_per_s is None else tok_per_s * time_scale


def node_latency(ms, time_scale: float):
    """Wall-clock milliseconds on the emulator -> the emulated node's milliseconds."""
    return None if ms is None or not time_scale else ms / time_scale


# A level's figures in tokens (or requests) per second: multiplied by the time scale.
RATE_FIELDS = ("output_tok_per_s", "output_tok_per_s_ci95", "output_tok_per_s_whole_run", "request_per_s",
               "server_output_tok_per_s", "decode_tok_per_s_per_stream")
# Its latencies in milliseconds: divided by the time scale.
LATENCY_FIELDS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
# Its joules per token: the emulated GPUs draw their modelled power over the wall-clock step, which
# the node takes 1 / time_scale times as long, so divided by the time scale as a latency is (the
# gpu_telemetry block, in watts and wall-clock joules, stays as measured).
ENERGY_FIELDS = ("energy_j_per_output_token", "energy_j_per_output_token_bounds")


def _convert(value, factor: float):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return round(value * factor, 6)
    if isinstance(value, list):
        return [_convert(v, factor) for v in value]
    if isinstance(value, dict):
        return {k: _convert(v, factor) for k, v in value.items()}
    return value


def level_at_node_speed(level: dict, server: dict | None) -> dict:
    """``level`` with its rates and latencies at the emulated node's speed, when ``server`` is the
    emulator at a known time scale; the measured figures kept as ``wall_clock_<name>``, and
    ``figures`` saying which (``node speed (emulator, time scale x)`` or ``wall-clock``). A level
    already converted, or from a real engine, is returned as it is."""
    emu = emulation(server)
    if "figures" in level:
        return level
    if emu is None or not emu["time_scale"]:
        level["figures"] = "wall-clock" if emu is not None else "measured"
        return level
    scale = emu["time_scale"]
    for names, factor in ((RATE_FIELDS, scale), (LATENCY_FIELDS, 1.0 / scale), (ENERGY_FIELDS, 1.0 / scale)):
        for name in names:
            if name in level:
                level[f"wall_clock_{name}"] = level[name]
                level[name] = _convert(level[name], factor)
    # Each request's latencies (goodput under compare_slo is counted from them) at node speed too; its tokens stay.
    # No wall-clock copy of these rows (each latency times the time scale): they may be thousands.
    records = level.get("request_latencies")
    if isinstance(records, dict) and isinstance(records.get("rows"), list):
        cols = [i for i, name in enumerate(records.get("columns") or []) if str(name).endswith("_ms")]
        records["rows"] = [[_convert(v, 1.0 / scale) if i in cols else v for i, v in enumerate(row)]
                           for row in records["rows"]]
    model = level.get("emulator_model")
    if isinstance(model, dict) and model.get("output_tok_per_s") is not None:
        model["wall_clock_output_tok_per_s"] = model["output_tok_per_s"]
        model["output_tok_per_s"] = _convert(model["output_tok_per_s"], scale)
    level["figures"] = (f"node speed (emulator, time scale {scale:g}): wall-clock rates x {scale:g}, latencies "
                        f"/ {scale:g}; the measured ones in wall_clock_*")
    return level


def engine_label(server: dict | None) -> str:
    """'engine: emulator, time scale 0.1' or 'engine: sglang' (what every line and report says)."""
    emu = emulation(server)
    if emu is not None:
        scale = emu["time_scale"]
        return f"engine: emulator, time scale {scale:g}" if scale is not None else "engine: emulator, time scale unknown"
    engine = (server or {}).get("engine") or "sglang"
    return f"engine: {engine}"


def command_time_scale(command) -> float | None:
    """The --emulator-time-scale of a recorded launch command (argv list): 1.0 when the command
    has none (the emulator's default), None when no command was recorded (engine=external)."""
    if not command:
        return None
    argv = [str(a) for a in command] if isinstance(command, list) else str(command or "").split()
    for i, token in enumerate(argv):
        try:
            if token == "--emulator-time-scale":
                return float(argv[i + 1])
            if token.startswith("--emulator-time-scale="):
                return float(token.split("=", 1)[1])
        except (IndexError, ValueError):
            return None
    return 1.0


def emulated_banner(servers: dict) -> list[str]:
    """Markdown lines opening a report when any mode ran on the emulator (``servers``: the
    summary's ``{mode: {engine, version, command}}``); empty when every mode ran on a real engine."""
    emulated = {m: command_time_scale(info.get("command")) for m, info in (servers or {}).items()
                if isinstance(info, dict) and (info.get("engine") == "emulator"
                                               or EMULATOR_MARK in str(info.get("version") or ""))}
    if not emulated:
        return []
    scales = sorted({s for s in emulated.values() if s is not None})
    scale_text = ", ".join(f"{s:g}" for s in scales) + (
        (", unknown" if scales else "unknown") if None in emulated.values() else "")
    return [
        f"> **EMULATED, NOT MEASURED ON GPUS**: mode(s) {', '.join(f'`{m}`' for m in emulated)} ran on the specbench "
        f"SGLang emulator (engine: emulator, time scale {scale_text}). Its figures come from a performance model of "
        "the node, not from the node.",
        f"> Figures below are the emulated node's own: the emulator's wall-clock rates times its time scale "
        f"({scale_text}), latencies divided by it (the raw <mode>.json files keep the measured ones as wall_clock_*; "
        "a results file written before they did holds wall-clock figures only). Speedups and the crossover "
        "concurrency do not depend on the scale.",
        "",
    ]

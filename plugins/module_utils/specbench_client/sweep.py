# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The sweep: the one loop over the levels (with its stop rule), used by the CLI, the module
bench_sweep and its action plugin; progress lines, redaction, results files.
"""
from __future__ import annotations

import json
import os
import re

from .labels import emulation, engine_label, node_latency, node_speed
from .level import run_level
from .summary import accept_length_is_lifetime, empty_level_fields, server_went_down


def format_level_line(level: dict, prefix: str = "", server: dict | None = None) -> str:
    """One progress line: concurrency, tok/s with its interval, TTFT p50, errors.

    With ``server`` (the results' server block) the line names the engine; on the emulator the
    tok/s are the emulated node's (a level converted by labels.level_at_node_speed, or converted
    here for one written before), the wall-clock figure beside them."""
    conc = level.get("concurrency")
    tok = level.get("output_tok_per_s")
    ci = level.get("output_tok_per_s_ci95")
    ttft = (level.get("ttft_ms") or {}).get("p50")
    emu = emulation(server) if server is not None else None
    if emu is not None and emu["time_scale"] is None:
        emu = None  # the emulator at an unknown time scale: wall-clock figures, so labelled
        wall = " wall-clock"
    else:
        wall = ""
    parts = [f"{prefix}{engine_label(server)} | C={conc:>4}" if server is not None else f"{prefix}C={conc:>4}"]
    if tok is None:
        parts.append("output      -  tok/s")
    elif "wall_clock_output_tok_per_s" in level:  # converted where it was made (labels.level_at_node_speed)
        interval = f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""
        wall_tok = level["wall_clock_output_tok_per_s"]
        parts.append(f"output {tok:9.1f} tok/s at node speed{interval} "
                     + (f"({wall_tok:.1f} wall-clock)" if wall_tok is not None else "(wall-clock -)"))
    elif emu is not None:
        scale = emu["time_scale"]
        interval = f" [{node_speed(ci[0], scale):.1f}, {node_speed(ci[1], scale):.1f}]" if ci else ""
        parts.append(f"output {node_speed(tok, scale):9.1f} tok/s at node speed{interval} "
                     f"({tok:.1f} wall-clock)")
    else:
        interval = f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""
        parts.append(f"output {tok:9.1f} tok/s{wall}{interval}")
    if emu is not None and ttft is not None and "wall_clock_ttft_ms" not in level:
        ttft = node_latency(ttft, emu["time_scale"])
    parts.append(f"TTFT p50 {ttft:.0f} ms" if ttft is not None else "TTFT p50 -")
    accept = level.get("accept_length")
    if accept and accept_length_is_lifetime(level):
        parts.append(f"accept {accept:.2f} (the server's lifetime figure, not this window's)")
    elif accept:
        parts.append(f"accept {accept:.2f}")
    elif level.get("accept_length_note"):
        parts.append("accept - (no speculative step counted over the window)")
    if level.get("energy_j_per_output_token"):
        parts.append(f"energy {level['energy_j_per_output_token']:.4g} J/token")
    parts.append(f"ok {level.get('requests_ok', 0)} failed {level.get('requests_failed', 0)}")
    window = level.get("window") or {}
    if window.get("adaptive"):
        parts.append(f"window {window.get('planned_s') or 0:g} s planned, {window.get('used_s') or 0:g} s used, "
                     + (f"+-{100 * window['target_rel_ci']:g}% reached" if window.get("target_reached")
                        else f"+-{100 * window['target_rel_ci']:g}% NOT reached (maximum {window.get('max_s') or 0:g} s)"))
    elif window.get("planned_s") is not None:
        parts.append(f"window {window.get('used_s') or 0:g} s")
    client = level.get("client") or {}
    if client.get("bottleneck"):
        parts.append("CLIENT-BOUND")
    down = server_went_down(level)
    if down:
        # A crashed server's level failed, whatever a results file written before said of saturation.
        parts.append(f"FAILED: {down}")
    elif level.get("saturated"):
        parts.append("SATURATED, not evidence about the node: " + "; ".join(level["saturated"]))
    if level.get("error"):
        parts.append(f"ERROR: {level['error']}")
    return " | ".join(parts)


_KEY_FLAG = re.compile(r"(--(?:admin-)?api-key(?:=|\s+))(\S+)")
_SECRET_KEYS = ("api_key", "admin_api_key", "authorization")


def redact(obj, secrets=()):
    """A copy of ``obj`` without API keys: secret-named keys, --api-key arguments and the
    literal secrets wherever they appear."""
    secrets = [s for s in secrets if s]

    def clean(value):
        if isinstance(value, dict):
            return {k: ("<redacted>" if str(k).lower() in _SECRET_KEYS and v else clean(v)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            items = [clean(v) for v in value]
            for i, item in enumerate(items[:-1]):
                if isinstance(item, str) and item in ("--api-key", "--admin-api-key"):
                    items[i + 1] = "<redacted>"
            return items
        if isinstance(value, str):
            value = _KEY_FLAG.sub(r"\1<redacted>", value)
            for secret in secrets:
                value = value.replace(secret, "<redacted>")
            return value
        return value

    return clean(obj)


def write_json_atomic(path: str, obj) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")
    os.replace(tmp, path)


def category_settings(settings: dict) -> list[tuple]:
    """(category or None, settings) for each run of the levels: one run with every prompt, or
    with ``categories: separate`` one per category, each with only that category's prompts."""
    records = settings.get("prompts") or []
    if settings.get("categories") != "separate" or not records:
        return [(None, settings)]
    names: list = []
    for r in records:
        name = r.get("category") or "uncategorised"
        if name not in names:
            names.append(name)
    return [(name, dict(settings, prompts=[r for r in records if (r.get("category") or "uncategorised") == name]))
            for name in names]


def sweep(settings: dict, server: dict, on_level=None, measure=None) -> list[dict]:
    """Every level in order (with ``categories: separate``, every level once per category, each
    level then naming its ``category``); ``on_level(level)`` after each (a progress line, a
    results file rewritten). Stops after a failed level when stop_on_error is set. A level the
    machine did not keep up with (``saturated``) is measured again, ``saturated_retries`` times
    at most; the earlier attempts are listed in ``remeasured_after``.

    ``measure(concurrency, settings)`` measures one level; by default here (``run_level``). The
    action plugin passes its own, which runs the level through the module on the node.
    """
    if measure is None:
        def measure(concurrency, run_settings):
            return run_level(run_settings, concurrency, server)
    levels = []
    for category, run_settings in category_settings(settings):
        for concurrency in settings["concurrency"]:
            level = measure(concurrency, run_settings)
            # A level the machine could not keep up with (keepup.saturation: the client's CPU, or
            # the emulator behind its own model) says nothing about the node: measure it again, up
            # to saturated_retries times, keeping each earlier attempt's reasons. One that stays
            # saturated stays named so, and the comparison leaves it out.
            earlier = []
            while (level.get("saturated") and not level.get("error")
                   and len(earlier) < settings["saturated_retries"]):
                earlier.append({"started_at": level.get("started_at"), "saturated": level["saturated"],
                                "output_tok_per_s": level.get("output_tok_per_s")})
                level = measure(concurrency, run_settings)
            if earlier:
                level["remeasured_after"] = earlier
            if category is not None:
                level["category"] = category
            levels.append(level)
            if on_level:
                on_level(level)
            if level.get("error") and settings["stop_on_error"]:
                return levels
    return levels


def sweep_outcome(levels: list[dict], stop_on_error: bool) -> tuple[str, str | None]:
    """(status, first error) of a finished sweep: complete, complete_with_errors, or stopped
    (a level failed and stop_on_error ended the sweep there)."""
    errors = [level["error"] for level in levels if level.get("error")]
    if not errors:
        return "complete", None
    return ("stopped" if stop_on_error else "complete_with_errors"), errors[0]


def unmeasured_level(concurrency: int, error: str) -> dict:
    """A level that could not be measured at all, with the fields of a measured one."""
    level = {"concurrency": concurrency, "error": error, "warnings": []}
    level.update(empty_level_fields())
    level.update({"output_tok_per_s_whole_run": None, "request_per_s": None, "failures_by_kind": {},
                  "decode_tok_per_s_per_stream": None, "server_running": None, "server_queued": None,
                  "client": None, "saturated": []})
    return level

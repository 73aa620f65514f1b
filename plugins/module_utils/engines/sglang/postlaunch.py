# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""SGLang's post-launch check: is the speculative mode the one the server runs?

A server can start and serve while running something else than its command asked for: SGLang
turns ``--speculative-adaptive`` off with a log warning only where it cannot run it (attention
data parallelism, top-k != 1, multi-layer EAGLE, two-batch overlap, ...:
srt/speculative/adaptive_spec_params.py, adaptive_unsupported_reason, applied by
srt/arg_groups/speculative_hook.py, _maybe_disable_adaptive), and forces the draft-token count to
steps + 1 at top-k 1. Measuring such a server would give figures for a mode that was not running,
so the check fails the mode, by name, before the sweep.

The speculative settings the command asks for are held against the resolved values
``/server_info`` reports at its top level (srt/entrypoints/http_server.py, server_info:
build_server_info in srt/utils/common.py, ServerArgs.resolved_dict). The module sglang_ready runs
it; ``engines.common.postlaunch_failure`` words the failure. Standard library only.
"""
from __future__ import annotations

SGLANG_FIELDS = ("speculative_algorithm", "speculative_adaptive", "speculative_num_steps",
                 "speculative_eagle_topk", "speculative_num_draft_tokens")
_FLAGS = {
    "--speculative-algorithm": "speculative_algorithm",
    "--speculative-num-steps": "speculative_num_steps",
    "--speculative-eagle-topk": "speculative_eagle_topk",
    "--speculative-num-draft-tokens": "speculative_num_draft_tokens",
}
# Spellings SGLang resolves to another algorithm (srt/arg_groups/speculative_hook.py: NEXTN is EAGLE).
ALIASES = {"NEXTN": "EAGLE"}


def sglang_asked(args: list) -> dict:
    """The speculative settings a SGLang command line asks for (argparse's rule: the last one
    wins; ``--flag=value`` or ``--flag value``). No algorithm asked: plain decoding."""
    asked: dict = {"speculative_algorithm": None}
    args = [str(a) for a in args or []]
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=")
        if flag == "--speculative-adaptive":
            asked["speculative_adaptive"] = True
        elif flag in _FLAGS:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
            if not eq:
                i += 1
            key = _FLAGS[flag]
            if key == "speculative_algorithm":
                value = ALIASES.get(str(value).upper(), str(value).upper()) if value else None
            else:
                try:
                    value = int(value)
                except (TypeError, ValueError):
                    pass
            asked[key] = value
        i += 1
    if asked["speculative_algorithm"] and "speculative_adaptive" not in asked:
        asked["speculative_adaptive"] = False
    return asked


def _why(key: str, want, got, running: dict, log_text: str) -> str:
    """The reason SGLang gives (or is known for) for running ``got`` instead of ``want``."""
    if key == "speculative_adaptive" and want and not got:
        line = next((ln.strip() for ln in reversed((log_text or "").splitlines())
                     if "speculative_adaptive disabled" in ln), None)
        return (f" (the server log says: {line[line.index('speculative_adaptive'):]})" if line else
                " (SGLang turns adaptive off with only a log warning under attention data parallelism, top-k != 1, "
                "multi-layer EAGLE or two-batch overlap)")
    if key == "speculative_num_draft_tokens" and running.get("speculative_eagle_topk") == 1:
        return " (at top-k 1 SGLang sets the draft tokens to steps + 1)"
    return ""


def sglang_check(args: list, info: dict, source: str | None, log_text: str = "") -> dict:
    """The speculative settings ``args`` asks for against what ``info`` (``/server_info``) says
    runs: {engine, source, asked, running, ok, mismatches}."""
    asked = sglang_asked(args)
    running = {key: (info or {}).get(key) for key in SGLANG_FIELDS}
    mismatches = []
    for key, want in asked.items():
        got = running.get(key)
        if key == "speculative_algorithm":
            same = (not want and not got) or (bool(want) and str(got or "").upper() == want)
        elif key == "speculative_adaptive":
            same = bool(got) == bool(want)
        else:
            try:
                same = got is not None and int(got) == int(want)
            except (TypeError, ValueError):
                same = str(got) == str(want)
        if not same:
            mismatches.append(f"{key}: asked {want!r}, the server runs {got!r}{_why(key, want, got, running, log_text)}")
    if not info:
        mismatches = ["the server answered neither /server_info nor /get_server_info: what it runs is unknown"]
    return {"engine": "sglang", "source": source, "asked": asked, "running": running, "ok": not mismatches,
            "mismatches": mismatches}

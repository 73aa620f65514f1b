# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The post-launch check: is the speculative mode the one the server runs?

A server can start and serve while running something else than its command asked for: SGLang
turns ``--speculative-adaptive`` off with a log warning only where it cannot run it (attention
data parallelism, top-k != 1, multi-layer EAGLE, two-batch overlap, ...:
srt/speculative/adaptive_spec_params.py, adaptive_unsupported_reason, applied by
srt/arg_groups/speculative_hook.py, _maybe_disable_adaptive), and forces the draft-token count to
steps + 1 at top-k 1. Measuring such a server would give figures for a mode that was not running,
so the check fails the mode, by name, before the sweep.

* SGLang: the speculative settings the command asks for, against the resolved values
  ``/server_info`` reports at its top level (srt/entrypoints/http_server.py, server_info:
  build_server_info in srt/utils/common.py, ServerArgs.resolved_dict).
* vLLM: a speculative mode must draft; its spec-decode counters
  (``vllm:spec_decode_num_drafts_total``, vllm/v1/spec_decode/metrics.py, registered only when
  speculation is on) must rise over a few generated tokens, and a plain mode must have none.
  Under a ``num_speculative_tokens_per_batch_size`` schedule (serve.yml) the check's one request is
  batch size 1: where the schedule drafts 0 tokens there, the counter must be present and must
  not rise (a rise means the engine dropped the schedule for its static count, as
  vllm/config/vllm.py does under data parallelism), and drafting at the larger batches is left to
  the serve proof, said so in the result.

Standard library only.
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
VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"


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


def parse_counter(text: str, name: str) -> float | None:
    """A Prometheus counter summed over its label sets; None when absent."""
    total = None
    for line in (text or "").splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
            try:
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return total


def vllm_tokens_at(spec: dict | None, batch_size: int) -> int | None:
    """The draft tokens vLLM schedules at ``batch_size`` under ``spec``: its static
    ``num_speculative_tokens``, or what its ``num_speculative_tokens_per_batch_size`` gives there,
    read the way vLLM expands it (vllm/v1/spec_decode/dynamic/utils.py,
    build_dynamic_sd_schedule_lookup: ranges sorted by start, a gap carries the previous range's
    count, past the last range its count, each capped at the static count). None: a speculative
    mode whose static count the engine derives itself (not in ``spec``)."""
    if not spec:
        return 0
    static = int(spec.get("num_speculative_tokens") or 0)
    schedule = sorted((int(a), int(b), int(k)) for a, b, k in spec.get("num_speculative_tokens_per_batch_size") or [])
    if not schedule:
        return static or None
    k = schedule[0][2]
    for start, _end, count in schedule:
        if start > batch_size:
            break
        k = count
    return min(static, k) if static else k


def vllm_check(spec: dict | None, before: str | None, after: str | None, tokens: int) -> dict:
    """Whether a vLLM server drafts as its mode asks: ``before`` and ``after`` are /metrics around
    one completion (batch size 1) of ``tokens`` tokens; a speculative mode's drafts counter must
    rise, or, where its schedule drafts nothing at batch size 1, be present and stay; a plain mode
    must have none."""
    d0, d1 = parse_counter(before or "", VLLM_DRAFTS), parse_counter(after or "", VLLM_DRAFTS)
    at_one = vllm_tokens_at(spec, 1)
    running = {"spec_decode_drafts_before": d0, "spec_decode_drafts_after": d1, "tokens": tokens,
               "draft_tokens_at_batch_1": at_one}
    asked = {"speculative_config": spec or None}
    mismatches = []
    scheduled_off = bool(spec) and at_one == 0
    if scheduled_off:
        running["unobserved"] = ("the schedule drafts 0 tokens at batch size 1, this check's one request: "
                                 "drafting at the larger batches is the serve proof's to show")
    if after is None:
        mismatches.append("the server has no /metrics: whether it drafts is unknown")
    elif spec and d1 is None:
        mismatches.append(f"speculative method {spec.get('method')!r} asked, but {VLLM_DRAFTS} "
                          "is absent (speculation is off)")
    elif scheduled_off and d1 > (d0 or 0.0):
        mismatches.append(f"the schedule drafts 0 tokens at batch size 1, but {VLLM_DRAFTS} rose over a "
                          f"{tokens}-token completion ({d0} -> {d1}): the engine is not running the schedule "
                          "(vLLM falls back to its static num_speculative_tokens under data parallelism)")
    elif spec and not scheduled_off and (d0 or 0.0) >= d1:
        mismatches.append(f"speculative method {spec.get('method')!r} asked, but {VLLM_DRAFTS} "
                          f"did not rise over a {tokens}-token completion ({d0} -> {d1})")
    elif not spec and d1:
        mismatches.append(f"plain decoding asked, but the server drafts ({VLLM_DRAFTS} = {d1})")
    return {"engine": "vllm", "source": "/metrics around a completion", "asked": asked, "running": running,
            "ok": not mismatches, "mismatches": mismatches}


def failure(mode: str, check: dict) -> str:
    """The error that fails the mode when the check found a mismatch."""
    return (f"mode {mode} is not running as asked, so it is not measured: {'; '.join(check['mismatches'])}. "
            "Fix the mode's flags (or the server's settings that made the engine change them) and launch again.")

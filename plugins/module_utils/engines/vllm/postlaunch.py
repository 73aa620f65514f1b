# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""vLLM's post-launch check: does the server draft as its mode asks?

A speculative mode must draft: its spec-decode counters (``vllm:spec_decode_num_drafts_total``,
vllm/v1/spec_decode/metrics.py, registered only when speculation is on) must rise over a few
generated tokens, and a plain mode must have none. Under a ``num_speculative_tokens_per_batch_size``
schedule (serve.yml) the check's one request is batch size 1: where the schedule drafts 0 tokens
there, the counter must be present and must not rise (a rise means the engine dropped the schedule
for its static count, as vllm/config/vllm.py does under data parallelism), and drafting at the
larger batches is left to the serve proof, said so in the result. The module sglang_ready runs it;
``engines.common.postlaunch_failure`` words the failure. Standard library only.
"""
from __future__ import annotations

VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"


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

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Per-category figures of one level: the requests that finished in the window, grouped by
their prompt's category (prompts.py), with the engine's own per-request speculation figures."""
from __future__ import annotations


def category_figures(raws: list[dict], level: dict) -> list[dict] | None:
    """Per category of the given prompts, over the requests that finished inside the window:
    requests, output tokens, their share of the level's tokens (its throughput is that share of
    the level's output_tok_per_s), and the accept length where the engine reported each request's verify steps
    (SGLang /generate: sum(completion_tokens) / sum(spec_verify_ct); vLLM with
    --per-request-spec-decode-metrics: 1 + sum(accepted) / sum(steps), the same tokens per
    verify step). None without categorised prompts."""
    names = next((r.get("categories") for r in raws if r.get("categories")), None)
    if not names:
        return None
    tally = {i: [0, 0.0, 0.0, 0.0] for i in range(len(names))}  # requests, tokens, spec tokens, verify steps
    for raw in raws:
        ws, we = raw.get("ws"), raw.get("window_end")
        if ws is None or we is None:
            continue
        for end, n, v, cat, st in zip(raw["ends"], raw["end_tokens"], raw["end_verify"],  # noqa: B905
                                      raw["end_category"], raw["end_spec_tokens"]):
            if ws <= end < we and cat >= 0:
                row = tally[cat]
                row[0] += 1
                row[1] += n
                row[2] += st
                row[3] += v
    total = sum(row[1] for row in tally.values())
    del level  # a category's rate is its share of the level's (at node speed on the emulator): compared later
    out = []
    for i, name in enumerate(names):
        count, tokens, spec_tokens, verify = tally[i]
        share = tokens / total if total else None
        out.append({"category": name, "requests": count, "output_tokens": int(tokens),
                    "throughput_share": round(share, 4) if share is not None else None,
                    "accept_length": round(spec_tokens / verify, 4) if verify else None,
                    "verify_steps": int(verify)})
    return out


def category_source(settings: dict, engine, spec: bool, per_category: list[dict]) -> str:
    """Where the per-category figures came from (``categories_source``)."""
    if settings["api"] == "native":
        per_request = "/generate meta_info.spec_verify_ct per request (SGLang)"
    else:
        per_request = engine.SPEC_REQUEST_SOURCE
    return (
        "requests finished in the window, by their prompt's category; accept length per category from "
        + per_request
        + (" (none reported: use the native API, launch vLLM with --per-request-spec-decode-metrics summary, "
           "or bench_categories: separate)" if spec and not any(c["accept_length"] for c in per_category) else ""))

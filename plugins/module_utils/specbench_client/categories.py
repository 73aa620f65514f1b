# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Per-category figures of one level: the requests that finished in the window, grouped by
their prompt's category (prompts.py), with the engine's own per-request speculation figures."""
from __future__ import annotations

import math

from .stats import t975


def ratio_of_sums_ci95(pairs: list[tuple[float, float]]) -> tuple[float | None, list[float] | None]:
    """Accepted tokens per verify step over requests, ``sum(a_i) / sum(v_i)``, with a cluster-robust 95%
    interval: each request is one cluster (its verify steps share its prompt's acceptance, so they are
    not independent draws). Delta method for a ratio of sums with the sandwich variance (HC1 factor
    n / (n - 1)): ``se = sqrt(n / (n - 1) * sum((a_i - R v_i)^2)) / sum(v_i)``, and R +- t(n - 1) se. Fewer than
    two requests with a verify step: the figure, no interval. Coverage on acceptance that varies by
    prompt: benchmarks/decision_coverage.py (categories)."""
    pairs = [(a, v) for a, v in pairs if v and v > 0]
    total_v = math.fsum(v for unused, v in pairs)
    if not pairs or total_v <= 0:
        return None, None
    ratio = math.fsum(a for a, unused in pairs) / total_v
    n = len(pairs)
    if n < 2:
        return ratio, None
    resid = math.fsum((a - ratio * v) ** 2 for a, v in pairs)
    se = math.sqrt(n / (n - 1) * resid) / total_v
    half = t975(n - 1) * se
    return ratio, [max(0.0, ratio - half), ratio + half]


def category_figures(raws: list[dict], level: dict) -> list[dict] | None:
    """Per category of the given prompts, over the requests that finished inside the window:
    requests, output tokens, their share of the level's tokens (its throughput is that share of
    the level's output_tok_per_s), and the accept length where the engine reported each request's verify steps
    (SGLang /generate: sum(completion_tokens) / sum(spec_verify_ct); vLLM with
    --per-request-spec-decode-metrics: 1 + sum(accepted) / sum(steps), the same tokens per
    verify step), with its cluster-robust 95% interval by request (``ratio_of_sums_ci95``). None
    without categorised prompts."""
    names = next((r.get("categories") for r in raws if r.get("categories")), None)
    if not names:
        return None
    tally = {i: [0, 0.0, 0.0, 0.0] for i in range(len(names))}  # requests, tokens, spec tokens, verify steps
    per_request: dict = {i: [] for i in range(len(names))}  # (spec tokens, verify steps) of each request
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
                per_request[cat].append((st, v))
    total = sum(row[1] for row in tally.values())
    del level  # a category's rate is its share of the level's (at node speed on the emulator): compared later
    out = []
    for i, name in enumerate(names):
        count, tokens, spec_tokens, verify = tally[i]
        share = tokens / total if total else None
        unused, ci = ratio_of_sums_ci95(per_request[i])
        out.append({"category": name, "requests": count, "output_tokens": int(tokens),
                    "throughput_share": round(share, 4) if share is not None else None,
                    "accept_length": round(spec_tokens / verify, 4) if verify else None,
                    "accept_length_ci95": [round(ci[0], 4), round(ci[1], 4)] if ci and verify else None,
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

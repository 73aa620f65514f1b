# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Why the crossover falls where it does: each level's speedup split into its two terms, and
the per-category table.

Step-time ratio, at one concurrency level::

    step_time_ratio = (spec ITL x accept length) / baseline ITL

ITL is the level's mean inter-token latency (``itl_ms.mean``: a chunk of k tokens has its gap
split over k, so the mean over tokens is the decode time per token). Speculative decoding makes
``accept length`` tokens per verify step, so spec ITL x accept length is the time of one verify
step (draft + verify) at that level, and the baseline's ITL the time of one plain decode step
(one token) at the same level. The ratio is the cost of a step relative to the baseline's.

Then the decode speedup is ``accept length / step_time_ratio`` (= baseline ITL / spec ITL,
exactly). The throughput speedup differs from it only by what is not decode (prefill and TTFT
in each request's time): ``speedup_from_terms`` is held beside the measured speedup, and a
reader sees whether speculation stopped paying because acceptance fell (accept length down) or
because verification got expensive at that batch size (step-time ratio up).

Figures come from the results files; the source of each (real GPU, real engine on CPU,
emulator) is the results' own.
"""

from __future__ import annotations

import math

from .common import _interval, _num, _rnd
from .intervals import log_half_width
from .verdict import level_verdict

TERMS_METHOD = ("step_time_ratio = (spec itl_ms.mean x accept_length) / baseline itl_ms.mean at the same level; "
                "speedup_from_terms = accept_length / step_time_ratio (decode only: TTFT and prefill left out)")


def _itl(level: dict | None):
    itl = (level or {}).get("itl_ms")
    return _num(itl.get("mean")) if isinstance(itl, dict) else None


def speedup_terms(base_level: dict | None, spec_level: dict | None) -> dict:
    """accept_length, step_time_ratio and speedup_from_terms of one level (None where a figure
    is missing: no accept length, no ITL)."""
    accept = _num((spec_level or {}).get("accept_length"))
    b_itl, s_itl = _itl(base_level), _itl(spec_level)
    if accept is None or not b_itl or not s_itl or accept <= 0:
        return {"accept_length": _rnd(accept), "step_time_ratio": None, "speedup_from_terms": None}
    ratio = s_itl * accept / b_itl
    return {"accept_length": _rnd(accept), "step_time_ratio": _rnd(ratio), "speedup_from_terms": _rnd(accept / ratio)}


def _categories(level: dict | None) -> dict:
    rows = (level or {}).get("categories")
    return {r["category"]: r for r in rows if isinstance(r, dict) and r.get("category")} if isinstance(rows, list) else {}


def category_rows(base_level: dict | None, spec_level: dict | None, row: dict) -> list[dict]:
    """Per category at one level of a mixed run: the speculative mode's accept length, each mode's
    throughput share, and the category's decode speedup, accept length / the level's step-time
    ratio. In a mixed batch every request shares the step, so a category differs only by its
    acceptance; its share of the level's tokens barely moves with it and is not its speedup.

    95% interval (on the log scale): the level's own (its speedup interval's half-width) and the
    category's accept length's: the client's cluster-robust interval by request
    (``accept_length_ci95``, specbench_client/categories.py: verify steps within one request share
    its prompt's acceptance, so they are not independent), else, for results from before it,
    1.96 / sqrt(verify steps). A verdict per
    category (pays / loses / unclear) from that interval, as for a level; at a saturated or failed
    level, that level's verdict."""
    b_cats, s_cats = _categories(base_level), _categories(spec_level)
    ratio, level_ci = row.get("step_time_ratio"), row.get("speedup_ci95")
    no_evidence = row.get("verdict") if row.get("saturated") or row.get("failed") else None
    level_w = log_half_width(row["speedup"], level_ci) if row.get("speedup") and level_ci else None
    out = []
    for name in list(s_cats) + [n for n in b_cats if n not in s_cats]:
        s, b = s_cats.get(name) or {}, b_cats.get(name) or {}
        accept, steps = _num(s.get("accept_length")), s.get("verify_steps") or 0
        speedup = ci = None
        if accept and ratio:
            speedup = accept / ratio
            accept_ci = _interval(s.get("accept_length_ci95"))
            # The client's cluster-robust interval by request (specbench_client/categories.py) when it gave one:
            # steps within one request share its prompt's acceptance. Older results: 1.96 / sqrt(verify steps).
            accept_w = (log_half_width(accept, accept_ci) if accept_ci
                        else 1.96 / math.sqrt(steps) if steps > 0 else None)
            if level_w is not None and accept_w is not None:
                w = math.hypot(level_w, accept_w)
                ci = [speedup * math.exp(-w), speedup * math.exp(w)]
        out.append({"category": name, "accept_length": _rnd(accept), "verify_steps": steps or None,
                    "throughput_share": _rnd(_num(s.get("throughput_share"))),
                    "baseline_throughput_share": _rnd(_num(b.get("throughput_share"))),
                    "speedup": _rnd(speedup), "speedup_ci95": [_rnd(ci[0]), _rnd(ci[1])] if ci else None,
                    # a saturated or failed level is no evidence for its categories either
                    "verdict": no_evidence or (level_verdict(speedup, ci) if speedup is not None else None),
                    "requests": s.get("requests")})
    return out


def paying_longest(rows: list[dict]) -> dict | None:
    """Per category, the highest level up to which its verdict is "pays" at every measured level
    from the first (None: it does not pay at the first; saturated levels left out, a failed one
    ends the run), and the categories that keep paying longest."""
    per: dict = {}
    for row in sorted(rows, key=lambda r: r["concurrency"]):
        if row.get("saturated"):
            continue  # no evidence either way (left out, as from the level verdicts)
        for cat in row.get("categories") or []:
            state = per.setdefault(cat["category"], {"last_paying": None, "broken": False})
            if state["broken"]:
                continue
            if cat.get("verdict") == "pays":
                state["last_paying"] = row["concurrency"]
            else:
                state["broken"] = True
    if not per:
        return None
    levels = {name: s["last_paying"] for name, s in per.items()}
    best = max((v for v in levels.values() if v is not None), default=None)
    leaders = [name for name, v in levels.items() if v is not None and v == best]
    text = (f"speculation keeps paying longest on {', '.join(leaders)} (clearly pays at every level up to C={best}, "
            "decode speedup per category from its accept length and the level's step-time ratio)" if leaders
            else "speculation clearly pays on no category at the first level measured")
    return {"pays_up_to": levels, "longest": leaders, "text": text}


def separate_categories(results: dict) -> list[str]:
    """The categories run separately (``bench_categories: separate``: levels that name one), in order."""
    names: list[str] = []
    for result in results.values():
        for level in (result or {}).get("levels") or []:
            name = level.get("category") if isinstance(level, dict) else None
            if name and name not in names:
                names.append(name)
    return names


def only_category(result: dict | None, name: str) -> dict | None:
    """A results file with only the levels of one separately-run category (their ``category``
    cleared, so the comparison takes them as the run's own levels)."""
    if not result:
        return result
    return dict(result, levels=[dict(lv, category=None) for lv in result.get("levels") or []
                                if isinstance(lv, dict) and lv.get("category") == name])


def category_crossovers(comparisons: dict) -> dict:
    """From one comparison per separately-run category: its crossover, and the categories that keep
    speculation paying longest (the highest level up to which every clear level pays; a category
    whose speedup is unclear or loses from its first level pays nowhere)."""
    out: dict = {}
    for name, comp in comparisons.items():
        last = None
        for row in sorted(comp.get("levels") or [], key=lambda r: r["concurrency"]):
            if row.get("verdict") == "pays":
                last = row["concurrency"]
            elif row.get("verdict") in ("loses", "unclear", "failed"):
                break
        out[name] = {"crossover_status": comp.get("crossover_status"),
                     "crossover_concurrency": comp.get("crossover_concurrency"),
                     "crossover_ci95": comp.get("crossover_ci95"), "crossover_text": comp.get("crossover_text"),
                     "pays_up_to": last}
    best = max((v["pays_up_to"] for v in out.values() if v["pays_up_to"] is not None), default=None)
    leaders = [n for n, v in out.items() if v["pays_up_to"] is not None and v["pays_up_to"] == best]
    text = (f"speculation keeps paying longest on {', '.join(leaders)} (clearly pays at every level up to C={best}, "
            "each category run separately)" if leaders else "speculation clearly pays on no category at its first level")
    return {"categories": out, "longest": leaders, "text": text}

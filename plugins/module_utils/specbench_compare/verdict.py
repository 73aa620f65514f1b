# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Per-level verdicts and the regions they form.

Each level pays (its speedup's interval lies above 1: the simultaneous one over all the
comparison's levels, FAMILY_METHOD, in compare_pair), loses (below 1), is unclear (the
interval straddles 1) or failed (a mode measured nothing there: every request failed, no output
token arrived). A level where the client or the engine was saturated is no evidence about the
node: it gets no verdict and stays out of the regions (``saturation`` names why). Verdicts are
taken as they are: an unclear or failed level is never read as its neighbours' verdict, so a
region of unclear or failed levels is a region of its own and no verdict is claimed across it.
"""

from __future__ import annotations

from statistics import NormalDist

from ..specbench_client.summary import server_went_down
from .common import _interval, _num

PAYS, LOSES, UNCLEAR, FAILED = "pays", "loses", "unclear", "failed"
CLEAR = (PAYS, LOSES)
# A level where a served configuration is the baseline itself (schedule.served_series): its gain is
# exactly 1, known without a measurement of its own.
BASELINE_SERVED = "baseline served"
STOPS, STARTS = "stops_paying", "starts_paying"
SATURATED = "saturated"
Z975 = 1.959964
# Family-wise error rate the verdicts hold over all the levels of one comparison at once.
FAMILY_ALPHA = 0.05
FAMILY_METHOD = (
    "family-wise: every claim (a level pays or loses, a crossing, a region, a speculation range, the schedule, the "
    "table) is read from simultaneous intervals that hold all m levels of the comparison at once with 95% "
    "probability (Bonferroni: each level's log half-width scaled from 1.96 to z(1 - 0.025/m), e.g. 2.73 at m = 8), so "
    "a true tie makes a claim at some level in at most 5% of runs; each level's own 95% interval (speedup_ci95) is "
    "reported beside it, labelled per-level, and decides nothing"
)


def family_z(m: int, alpha: float = FAMILY_ALPHA) -> float:
    """The two-sided critical value that holds ``m`` intervals at once at ``alpha`` (Bonferroni)."""
    return NormalDist().inv_cdf(1.0 - alpha / (2.0 * max(1, int(m))))


def paying_runs(points: list[tuple[float, str]]) -> list[list[float]]:
    """[[first, last], ...]: each maximal stretch of consecutive levels that all clearly pay.

    ``points`` are (concurrency, verdict) for every level of the comparison, in order, including the
    ones that are missing, unclear, failed or saturated: any level that does not clearly pay ends a
    stretch. This is the one speculation rule (SGLang's table, vLLM's schedule, the recommendation,
    serve.yml): speculate from a clearly paying level to the last clearly paying level, no further.
    """
    out: list[list[float]] = []
    prev_pays = False
    for conc, verdict in sorted(points, key=lambda p: p[0]):
        if verdict == PAYS:
            if prev_pays:
                out[-1][1] = conc
            else:
                out.append([conc, conc])
        prev_pays = verdict == PAYS
    return out


def level_verdict(speedup, ci) -> str | None:
    """pays (the 95% interval above 1), loses (below 1), unclear (it straddles 1); None without a speedup.

    A level without an interval is unclear: the client claims none where the window held too few
    requests for one (a request or two), so the point figure alone is no evidence either way.
    """
    speedup, ci = _num(speedup), _interval(ci)
    if speedup is None:
        return None
    if ci is None:
        return UNCLEAR
    if ci[0] > 1.0:
        return PAYS
    if ci[1] < 1.0:
        return LOSES
    return UNCLEAR


def level_failure(level: dict | None) -> str | None:
    """Why one mode's level measured nothing (None when it measured a rate).

    A level failed when it has no positive throughput or no request succeeded: every request
    failed, no output token arrived (``output_tok_per_s: 0.0``), the client itself failed. Its
    ``error`` (the client's words) names the cause when there is one. A level whose server went
    down during it (a connection refused or cut mid-response: specbench_client/summary.py,
    server_went_down) failed too, whatever it delivered before: that figure is a dying server's,
    and the keep-up checks' reasons it may carry (its /metrics stopped answering) are no saturation.
    """
    if not isinstance(level, dict):
        return None
    down = server_went_down(level)
    if down:
        return f"{down} ({level['error']})" if level.get("error") else down
    thr = _num(level.get("output_tok_per_s"))
    ok = level.get("requests_ok")
    if thr is not None and thr > 0 and not (isinstance(ok, int) and not isinstance(ok, bool) and ok == 0):
        return None
    if level.get("error"):
        return str(level["error"])
    if thr == 0.0:
        return "no output token arrived (output_tok_per_s 0)"
    return "no request succeeded" if ok == 0 else "no throughput was measured"


def level_saturation(level: dict | None) -> list[str]:
    """Why one mode's level is no evidence about the node: what was saturated ([] when nothing was).

    The client's own bottleneck flag (``client.bottleneck``, set by specbench_client/summary.py
    when a worker was busy near a whole core) and the list ``saturated`` a level may carry (the
    emulator runs' keep-up checks write it, e.g. ``"engine: delivered 55% of its own model's rate"``).
    """
    if not isinstance(level, dict):
        return []
    out = []
    client = level.get("client") if isinstance(level.get("client"), dict) else {}
    if client.get("bottleneck"):
        cpu = _num(client.get("cpu_percent_max_worker")) or _num(client.get("cpu_percent"))
        out.append("client: the benchmark client was the bottleneck" + (f" ({cpu:.0f}% CPU)" if cpu is not None else ""))
    extra = level.get("saturated")
    if isinstance(extra, list):
        out.extend(str(item) for item in extra if isinstance(item, str) and item and str(item) not in out)
    return out


def _runs(verdicts: list[str]) -> list[list]:
    """[verdict, first index, last index] for each run of equal verdicts."""
    runs: list[list] = []
    for i, v in enumerate(verdicts):
        if runs and runs[-1][0] == v:
            runs[-1][2] = i
        else:
            runs.append([v, i, i])
    return runs


def regions(points: list[tuple[float, str]]) -> list[dict]:
    """Contiguous levels with the same verdict: from/to concurrency, verdict, levels (and their indexes)."""
    out = []
    for v, first, last in _runs([v for unused, v in points]):
        out.append({"from_concurrency": points[first][0], "to_concurrency": points[last][0], "verdict": v,
                    "levels": last - first + 1, "first": first, "last": last})
    return out


def gaps(regs: list[dict]) -> list[dict]:
    """Regions without a clear verdict that are not the change between a paying and a losing region.

    An unclear or failed stretch between a paying and a losing region is where the crossing lies;
    anywhere else (at either end, or between two regions of one verdict) the data cannot tell.
    """
    out = []
    for n, reg in enumerate(regs):
        if reg["verdict"] in CLEAR:
            continue
        below = next((r["verdict"] for r in reversed(regs[:n]) if r["verdict"] in CLEAR), None)
        above = next((r["verdict"] for r in regs[n + 1:] if r["verdict"] in CLEAR), None)
        if below and above and below != above:
            continue
        out.append(reg)
    return out


def series_status(regs: list[dict]) -> str:
    """The whole series in one word, from its regions (see crossover.CROSSOVER_METHOD).

    crosses (pays, then loses), loses_then_pays (one crossing upwards), multiple (the verdict
    changes more than once), pays_everywhere / never_pays (every level clear and the same),
    pays_then_unclear / unclear_then_pays / pays_where_clear (pays wherever the verdict is clear,
    with an unclear or failed stretch above, below, or elsewhere) and their losing mirrors,
    unclear (no level clear), unknown (no level at all).
    """
    if not regs:
        return "unknown"
    kinds = [r["verdict"] for r in regs if r["verdict"] in CLEAR]
    kinds = [k for n, k in enumerate(kinds) if n == 0 or kinds[n - 1] != k]
    if not kinds:
        return UNCLEAR if any(r["verdict"] == UNCLEAR for r in regs) else "unknown"
    if kinds == [PAYS, LOSES]:
        return "crosses"
    if kinds == [LOSES, PAYS]:
        return "loses_then_pays"
    if len(kinds) > 2:
        return "multiple"
    word = "pays" if kinds == [PAYS] else "loses"
    holes = gaps(regs)
    if not holes:
        return "pays_everywhere" if word == "pays" else "never_pays"
    top = holes[-1] is regs[-1]
    bottom = holes[0] is regs[0]
    if len(holes) == 1 and top:
        return f"{word}_then_unclear"
    if len(holes) == 1 and bottom:
        return f"unclear_then_{word}"
    return f"{word}_where_clear"

"""What one window's interval can and cannot hold of a node drift as slow as the window (COMPUTED figures).

Issue 36, item 6 asks that the windows summarize does not warn about cover the node's long-run rate in at
least 90% of runs under a drift correlated over up to 60 requests, in windows of 50-400. The ``windows``
scenario of benchmarks/decision_coverage.py measures the rule that ships (summary.window_interval and its
warning); this script measures the three ways out of its misses, on the same simulated closed loop
(tests/closed_loop.py, decision_coverage's WINDOW_LOOP: C=8, a request of 9.1 s, a 5% AR(1) drift whose
integrated correlation time is tau request durations; tau 0 is a steady node), against the same truth:

* ``now``: the shipped interval; ``warned`` its warning (or no interval), ``unwarned`` the coverage of the
  rest, ``calmest quarter`` the coverage of the quarter of windows whose own data show the least drift
  (the allowance below, over the half-width): whether a warning drawn from the window's own evidence of a
  drift could keep the windows it leaves unwarned at 90%;
* ``allowance H``: the interval widened, never warned, by the drift the window's own variogram shows,
  extrapolated to correlation times up to H times the window (a prior on the drift's slowness): the
  variogram's lags from one request to a third of the window are fitted with a + s2 (1 - exp(-lag / T)),
  T the best fit up to H * W / 2, and s2 * g(W / T) (an AR(1)'s variance of a window mean,
  g(x) = 2 (x - 1 + exp(-x)) / x ** 2) added in quadrature;
* ``allowance + floor``: both, the floor's part added in quadrature to the allowance's interval.
* ``floor``: the interval widened as compare widens a level measured in one launch (launch_noise.widen):
  by t * sigma_L of the node's noise floor, measured on the same drifting node by the first run's
  relaunches (two modes, two levels, two launches each, a sweep apart: independent windows; launch_noise's
  own estimate and floor_from, 2 degrees of freedom). A drift slower than a window moves a relaunch's
  window as a launch effect does.

Each cell prints the coverage and the median half-width (% of the rate); a rate p over n runs has a
standard error of sqrt(p (1 - p) / n): 2.1% at 90% over 200.

Run: .venv/bin/python benchmarks/window_drift_limits.py [--runs 200] [--taus 0,5,20,60] [--windows 50,100,400]
"""

from __future__ import annotations

import argparse
import datetime
import math
import random
import sys
import time

import decision_coverage as dc  # the windows scenario's loop and truth; its sys.path reaches the collection

from ansible_collections.specbench.core.plugins.module_utils.specbench_client.stats import t975
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import launch_noise

LOOP = dc.WINDOW_LOOP
HORIZONS = (1.2, 2.0)  # the allowance's prior: drifts correlated over up to H windows
GRID = 40  # correlation times tried by the allowance's fit, geometric


def window(rng: random.Random, tau: float, length: float) -> tuple[list, tuple, float]:
    """One window (fine bins, requests, seconds) of the loop, ``length`` request durations long, under the
    drift of correlation time ``tau`` request durations (none at 0)."""
    if tau <= 0:
        seconds = length * dc.WINDOW_DURATION
        fine, requests = dc.closed_loop_window(rng, LOOP["streams"], LOOP["tokens"], LOOP["speed"], LOOP["spread"],
                                               LOOP["ttft"], seconds)
        return fine, requests, seconds
    return dc.drifting_window(rng, tau, length)


def _g(x: float) -> float:
    return 2.0 * (x - 1.0 + math.exp(-x)) / (x * x) if x > 1e-9 else 1.0


def drift_allowance(fine: list, seconds: float, durations: list, horizon: float) -> float:
    """The variance of the window's mean (rate units squared) that a drift shaped as its variogram shows
    would give, its correlation time fitted up to ``horizon`` windows (module docstring)."""
    group = -(-len(fine) // dc.MAX_BINS)
    x = [sum(fine[i:i + group]) / group for i in range(0, len(fine) - group + 1, group)]
    n = len(x)
    bin_s = seconds / len(fine) * group
    first = max(1, math.ceil(sum(durations) / len(durations) / bin_s)) if durations else 1
    lags = list(range(first, n // 3 + 1))
    if len(lags) < 4:
        return 0.0
    gam = [math.fsum((x[t + lag] - x[t]) ** 2 for t in range(n - lag)) / (2 * (n - lag)) for lag in lags]
    w = [float(n - lag) for lag in lags]
    sw, swg = math.fsum(w), math.fsum(wi * gi for wi, gi in zip(w, gam, strict=True))
    best = None
    top = horizon * n / 2
    for j in range(GRID):
        tc = max(0.5, first / 2) * (top / max(0.5, first / 2)) ** (j / (GRID - 1))
        f = [1.0 - math.exp(-lag / tc) for lag in lags]
        swf = math.fsum(wi * fi for wi, fi in zip(w, f, strict=True))
        swff = math.fsum(wi * fi * fi for wi, fi in zip(w, f, strict=True))
        swfg = math.fsum(wi * fi * gi for wi, fi, gi in zip(w, f, gam, strict=True))
        det = sw * swff - swf * swf
        s2 = (sw * swfg - swf * swg) / det if det > 0 else 0.0
        a = (swg - s2 * swf) / sw
        if s2 < 0:  # no drift term: the plateau alone
            s2, a = 0.0, swg / sw
        elif a < 0:  # no plateau: the drift term alone
            s2, a = swfg / swff, 0.0
        ss = math.fsum(wi * (gi - a - s2 * fi) ** 2 for wi, gi, fi in zip(w, gam, f, strict=True))
        if best is None or ss < best[0]:
            best = (ss, s2 * _g(n / tc))
    return best[1]


def first_run_floor(rng: random.Random, tau: float, length: float) -> dict | None:
    """The node's floor from a first run's relaunches on this drifting node (launch_noise.estimate, floor_from)."""
    results = {}
    for mode in ("baseline", "spec"):
        levels = []
        for conc in (1, 30):
            rates, cis = [], []
            for _launch in range(2):
                fine, requests, seconds = window(rng, tau, length)
                rates.append(sum(fine) / len(fine))
                cis.append(dc.window_interval(fine, seconds, requests)["ci"])
            levels.append({"concurrency": conc, "output_tok_per_s": sum(rates) / 2, "launch_tok_per_s": rates,
                           "launch_ci95": cis})
        results[mode] = {"levels": levels}
    part = launch_noise.estimate(results)
    if part is None:
        return None
    now = datetime.datetime.now(datetime.UTC)
    part["measured_at"] = now.isoformat()
    return launch_noise.floor_from({"first": part}, now=now)


def cell(rng: random.Random, tau: float, length: float, runs: int) -> dict:
    truth = dc.WINDOW_TRUTH
    rows = []
    for _run in range(runs):
        fine, requests, seconds = window(rng, tau, length)
        found = dc.window_interval(fine, seconds, requests)
        ci = found["ci"]
        if ci is None or ci[0] <= 0:
            rows.append(None)
            continue
        mean = sum(fine) / len(fine)
        half = (ci[1] - ci[0]) / 2
        off = abs((ci[0] + ci[1]) / 2 - truth)
        row = {"warned": found["warning"] is not None, "covered": ci[0] <= truth <= ci[1], "half": half / mean}
        for h in HORIZONS:
            v = drift_allowance(fine, seconds, requests[1], h)
            wide = math.sqrt(half ** 2 + dc.Z ** 2 * v)
            row[h] = (off <= wide, wide / mean)
            if h == HORIZONS[0]:
                row["evidence"] = math.sqrt(v) / half
        floor = first_run_floor(rng, tau, length)
        w = (math.log(ci[1]) - math.log(ci[0])) / 2
        extra = t975(floor["df"]) * floor["launch_sd"] if floor else 0.0
        width = math.hypot(w, extra)
        row["floor"] = (abs(math.log(truth / mean)) <= width, math.expm1(width))
        both = math.hypot(math.log1p(row[HORIZONS[0]][1]), extra)
        row["both"] = (abs(math.log(truth / mean)) <= both, math.expm1(both))
        rows.append(row)
    return rows


def pct(xs: list[bool]) -> str:
    return f"{100 * sum(xs) / len(xs):5.1f}% of {len(xs):3d}" if xs else "    - of   0"


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return 100 * xs[len(xs) // 2] if xs else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--taus", default="0,5,20,60")
    parser.add_argument("--windows", default="50,100,400")
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    start = time.monotonic()
    print(f"window_drift_limits: COMPUTED figures (simulated closed loop C={LOOP['streams']}, a request "
          f"{dc.WINDOW_DURATION:.1f} s, a {100 * dc.WINDOW_DRIFT_SD:.0f}% drift; tau and W in request durations, "
          f"x{LOOP['streams']} requests), {args.runs} runs per cell, seed {args.seed}")
    print("  coverage of the long-run rate (median half-width, % of the rate)")
    names = [f"allowance {h:g}" for h in HORIZONS] + ["floor (first run)", f"allowance {HORIZONS[0]:g} + floor"]
    head = " | ".join([f"{'now: warned':>11} {'unwarned':>20} {'calmest quarter':>16}"] + [f"{n:>24}" for n in names])
    print(f"  {'tau':>3} {'W':>4} | {head}")
    for tau in (float(t) for t in args.taus.split(",")):
        for length in (float(w) for w in args.windows.split(",")):
            rows = cell(random.Random(f"{args.seed}-{tau}-{length}"), tau, length, args.runs)
            got = [r for r in rows if r]
            warned = sum(1 for r in rows if r is None or r["warned"]) / len(rows)
            unwarned = [r for r in got if not r["warned"]]
            calm = sorted(got, key=lambda r: r["evidence"])[: max(1, len(got) // 4)]
            half = median([r["half"] for r in unwarned])
            cells = [f"{100 * warned:10.1f}% {pct([r['covered'] for r in unwarned])} ({half:4.2f}%) "
                     f"{pct([r['covered'] for r in calm]):>16}"]
            for key in (*HORIZONS, "floor", "both"):
                cells.append(f"{pct([r[key][0] for r in got])} ({median([r[key][1] for r in got]):5.2f}%)")
            print(f"  {tau:>3g} {length:>4g} | " + " | ".join(cells), flush=True)
    print(f"  ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

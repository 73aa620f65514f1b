"""The default compare design as compare.yml runs it, simulated on known truths through the comparison package's
own functions (COMPUTED): planned launches (A B B A with the floor's relaunch levels on a node without a floor,
one per mode on one with), then sequential rounds (sequential.plan_round) at the levels left unclear, each look
family-wise at its share of the error rate (sequential.look_alphas), the node's floor read again at every look
with this run's launches (launch_noise). benchmarks/decision_coverage.py prints its figures; the unit tests
(tests/unit/.../test_sequential.py) hold a few cells of them."""

from __future__ import annotations

import datetime
import math
import random

from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp

SEED_LEVELS = [1, 2, 5, 10, 30, 70, 100, 250]
Z = 1.959964
CLAIMS = ("pays", "loses")


def base_curve(conc: float) -> float:
    """A baseline throughput curve (tok/s) that saturates, as a GPU's does: 100 at C=1, ~2000 at the top."""
    return 100.0 * conc / (1.0 + conc / 25.0)


def claims(comp: dict) -> list[str]:
    """Every claim a comparison makes about the speedup's sign: level verdicts, crossings, ranges."""
    out = [f"C={r['concurrency']} {r['verdict']}" for r in comp["levels"] if r["verdict"] in CLAIMS]
    out += [f"crossing {c['direction']}" for c in comp["crossings"]]
    if comp.get("speculate_ranges"):
        out.append(f"speculate {comp['speculate_ranges']}")
    return out


NOW = "2026-01-01T00:00:00+00:00"
MAX_LAUNCHES = 6  # compare_max_launches' default
PRIOR = (cmp.launch_noise.PRIOR_SD, cmp.launch_noise.PRIOR_DF)  # compare_noise_floor_prior_sd and _df's defaults
LOAD_LEVELS = 3.0  # a launch's fixed cost (model load, warm-up) in levels' measuring time, for time_x


def launch_effects(rng: random.Random, levels, launch_sd: float, rho: float) -> dict:
    """One launch's multiplicative effect per level: a part shared by every level (correlation rho) and one per level."""
    if not launch_sd:
        return dict.fromkeys(levels, 1.0)
    common = rng.gauss(0.0, 1.0)
    return {c: math.exp(launch_sd * (math.sqrt(rho) * common + math.sqrt(1.0 - rho) * rng.gauss(0.0, 1.0)))
            for c in levels}


class Drift:
    """The node's slow drift: a multiplicative AR(1) on the log rate, relative sd ``sd``, correlation time ``tau``
    (request durations), advanced over the run's own clock (loads, warm-ups, windows); a window's rate is the mean
    over its span. The window's own interval does not see it (the conservative case)."""

    def __init__(self, rng: random.Random, sd: float, tau: float, window: float):
        self.rng, self.sd, self.tau, self.window = rng, sd, tau, window
        self.step = max(0.5, min(tau / 5.0, window / 20.0))
        self.phi = math.exp(-self.step / tau)
        self.noise = math.sqrt(1.0 - self.phi ** 2) * sd
        self.d = rng.gauss(0.0, sd)

    def advance(self, span: float) -> float:
        """Advance ``span`` request durations; the mean of exp(drift) over them."""
        n = max(1, int(round(span / self.step)))
        total = 0.0
        for _ in range(n):
            self.d = self.phi * self.d + self.noise * self.rng.gauss(0.0, 1.0)
            total += math.exp(self.d)
        return total / n


def one_launch(rng, mode: str, truth: dict, levels, half: float, launch_sd: float, rho: float,
               drift: Drift | None = None) -> dict:
    effects = launch_effects(rng, levels, launch_sd, rho)
    sd = half / Z
    out = []
    if drift:
        drift.advance(2.0 * drift.window)  # the model load
    for c in levels:
        moved = 1.0
        if drift:
            drift.advance(drift.window / 2.0)  # the level's warm-up
            moved = drift.advance(drift.window)
        out.append(level(c, truth[c] * effects[c] * moved * math.exp(rng.gauss(0.0, sd)), half))
    return result(mode, out)


def design_run(rng: random.Random, speedups: dict, launch_sd: float, half: float = 0.02, design: str = "default",
               earlier: dict | None = None, rho: float = 1.0, max_launches: int = MAX_LAUNCHES,
               drift: Drift | None = None) -> dict:
    """One compare run of ``design`` (default: planned + sequential rounds; fixed: the planned launches only) on a
    node whose earlier runs stored ``earlier`` floor parts (None: a first run). Returns the final comparison, the
    launches per mode, the run's cost in levels' time (launches at LOAD_LEVELS each) and this run's floor part."""
    now = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    levels = sorted(speedups)
    truth = {"baseline": {c: base_curve(c) for c in levels}}
    truth["eagle3"] = {c: base_curve(c) * speedups[c] for c in levels}
    first = not earlier
    runs: dict = {"baseline": [], "eagle3": []}
    cost = 0.0
    planned = 2 if first else 1
    again = cmp.relaunch_levels(levels, 2)
    for n in range(planned):
        order = ("baseline", "eagle3") if n % 2 == 0 else ("eagle3", "baseline")
        for mode in order:
            at = levels if n == 0 else again
            runs[mode].append((None if n == 0 else f"launch{n + 1}", one_launch(rng, mode, truth[mode], at, half,
                                                                                launch_sd, rho, drift)))
            cost += LOAD_LEVELS + len(at)
    rounds = max(0, max_launches - planned) if design == "default" else 0
    alphas = cmp.look_alphas(rounds)
    looks = []
    while True:
        look = len(looks) + 1
        pooled = {m: cmp.pool_runs(r) for m, r in runs.items()}
        parts = dict(earlier or {})
        mine = cmp.launch_estimate(pooled)
        if mine:
            mine["measured_at"] = NOW
            parts["this"] = mine
        floor = cmp.launch_floor_from(parts, now=now, prior_sd=PRIOR[0], prior_df=PRIOR[1])
        comp = cmp.compare_pair(pooled["baseline"], pooled["eagle3"], "baseline", "eagle3", floor, alphas[look - 1],
                                looks)
        plan = cmp.plan_round({"eagle3": comp}, look, rounds, max_launches, 0.0, None, 1.0, LOAD_LEVELS, "baseline")
        if plan["done"]:
            break
        looks.append((pooled["baseline"], pooled["eagle3"], floor, alphas[look - 1]))
        for mode in plan["order"]:
            at = plan["levels"].get(mode) or []
            if at:
                runs[mode].append((f"round{look}", one_launch(rng, mode, truth[mode], at, half, launch_sd, rho,
                                                              drift)))
                cost += LOAD_LEVELS + len(at)
    return {"comp": comp, "launches": len(runs["eagle3"]), "cost": cost, "part": mine, "floor": floor}


def fixed_grid_cost(levels) -> float:
    """The old fixed grid: one launch per mode at every level."""
    return 2 * (LOAD_LEVELS + len(levels))


def earlier_parts(rng: random.Random, count: int, launch_sd: float, half: float = 0.02, rho: float = 1.0,
                  drift: Drift | None = None) -> dict:
    """``count`` earlier first runs' floor parts on this node (A B B A with the relaunch levels)."""
    parts = {}
    for e in range(count):
        out = design_run(rng, dict.fromkeys(SEED_LEVELS, 1.0), launch_sd, half, "fixed", None, rho, drift=drift)
        parts[f"earlier{e}"] = out["part"]
    return parts


def tie_cell(rng: random.Random, n: int, which: str, **kw) -> tuple[int, int, int, int, int]:
    """n tie runs of the default design: (runs with any claim, per-level 95% covers, levels, family covers, levels
    with a family interval)."""
    any_claim = cover = total = fam = fam_total = 0
    drift_args = kw.pop("drift_args", None)
    for _ in range(n):
        drift = Drift(rng, *drift_args) if drift_args else None
        earlier = earlier_parts(rng, 1, kw.get("launch_sd", 0.0), kw.get("half", 0.02), kw.get("rho", 1.0),
                                drift) if which == "later" else None
        out = design_run(rng, dict.fromkeys(SEED_LEVELS, 1.0), kw.get("launch_sd", 0.0), kw.get("half", 0.02),
                         "default", earlier, kw.get("rho", 1.0), drift=drift)
        any_claim += bool(claims(out["comp"]))
        for row in out["comp"]["levels"]:
            ci, ci_f = row.get("speedup_ci95"), row.get("speedup_ci_family")
            total += 1
            cover += bool(ci) and ci[0] <= 1.0 <= ci[1]
            if ci_f:
                fam_total += 1
                fam += ci_f[0] <= 1.0 <= ci_f[1]
    return any_claim, cover, total, fam, fam_total




def fleet_run(rng: random.Random, speedups: dict, nodes: int, node_sd: float, launch_sd: float,
              half: float = 0.02) -> dict:
    """A compare run on ``nodes`` nodes of one kind, each its planned first-run launches (A B B A, the second at
    the floor's relaunch levels) read with the floor it measures, each node's speed its own (relative sd
    ``node_sd``, moving both modes alike) and its speedup its own too (the same sd, half of it: a node's clocks
    and topology change what speculation buys), one verdict for the kind (fleet.fleet_kinds). Returns it."""
    levels = sorted(speedups)
    again = cmp.relaunch_levels(levels, 2)
    hosts = {}
    for n in range(nodes):
        node = math.exp(rng.gauss(0.0, node_sd)) if node_sd else 1.0
        own = math.exp(rng.gauss(0.0, node_sd / 2.0)) if node_sd else 1.0
        truth = {"baseline": {c: base_curve(c) * node for c in levels}}
        truth["eagle3"] = {c: base_curve(c) * node * own * speedups[c] for c in levels}
        runs: dict = {"baseline": [], "eagle3": []}
        for k in range(2):
            for mode in (("baseline", "eagle3") if k == 0 else ("eagle3", "baseline")):
                at = levels if k == 0 else again
                runs[mode].append((f"launch{k + 1}", one_launch(rng, mode, truth[mode], at, half, launch_sd, 1.0)))
        pooled = {m: cmp.pool_runs(r) for m, r in runs.items()}
        part = cmp.launch_estimate(pooled)
        part["measured_at"] = NOW
        floor = cmp.launch_floor_from({"this": part}, now=datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC),
                                      prior_sd=PRIOR[0], prior_df=PRIOR[1])
        comp = cmp.compare_pair(pooled["baseline"], pooled["eagle3"], "baseline", "eagle3", floor)
        hosts[f"node{n}"] = {"results": pooled, "comparisons": {"eagle3": comp}, "modes": ["baseline", "eagle3"],
                             "complete": True}
    return cmp.fleet_kinds(hosts, "baseline")["kinds"][0]

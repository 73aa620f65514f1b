# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A fleet is launches too: one verdict for every node of one kind, from all of them.

Teams run one model on many identical nodes. Where a compare run measured two or more nodes of one **kind**
(``node_kind``: the same engine and version, model, GPU name and count, driver, and the same sweep: levels,
lengths, API, windows, prompts, modes), each level's speedup is read from the nodes' own (``kind_comparison``:
the mean of their log speedups, an interval from their spread with t on nodes - 1 degrees of freedom, which
holds node-to-node and launch-to-launch variation of the speedup, never narrower than the nodes' own intervals
allow), family-wise over the levels at the whole FAMILY_ALPHA, a family of its own beside each node's. Nodes of
another kind are never pooled: the index names the fields that keep a node apart. Each node's own verdict stays
in the index beside its kind's. The nodes are measured at once (Ansible's forks run compare.yml's plays on every
host together), so a kind's verdict costs one node's time.

Coverage and power for 2, 4 and 8 nodes: benchmarks/decision_coverage.py ``fleet`` (COMPUTED).
"""

from __future__ import annotations

import json
import math

from ..specbench_client.stats import t975
from .crossover import crossover
from .intervals import family_ci, log_half_width
from .launch_noise import floor_key
from .recommend import recommendation
from .verdict import FAMILY_ALPHA, LOSES, PAYS, UNCLEAR, family_z, level_verdict

SETTINGS = ("concurrency", "input_len", "output_len", "api", "warmup_s", "window_s", "prompts_source", "prompts_file",
            "lengths", "categories")
FLEET_METHOD = (
    "one verdict per kind of node (engine and version, model, GPU name and count, driver, the sweep's settings and "
    "modes: nodes that differ in any are never pooled): each level's speedup the mean of the nodes' log speedups, "
    "its interval the wider of t (nodes - 1 degrees of freedom) on their spread, which holds node-to-node and "
    "launch-to-launch variation of the speedup, and the nodes' own intervals' root-mean-square over sqrt(nodes); "
    "family-wise over the kind's levels, a family of its own beside each node's"
)


def node_kind(results: dict[str, dict], baseline: str, modes: list[str]) -> dict:
    """What makes two nodes' measurements one kind: floor_key less the GPUs' own ids, the sweep's settings
    (the baseline's) and the modes compared."""
    key = floor_key(results)
    key.pop("gpu_uuids", None)
    settings = (results.get(baseline) or {}).get("settings") or {}
    for name in SETTINGS:
        value = settings.get(name)
        key[f"bench_{name}"] = sorted(value) if name == "concurrency" and isinstance(value, list) else value
    key["modes"] = list(modes)
    return key


def fleet_kinds(hosts: dict[str, dict], baseline: str) -> dict:
    """Per-kind verdicts for a run's hosts.

    ``hosts``: host -> {"results": {mode: pooled results}, "comparisons": {spec mode: compare_pair's},
    "modes": [...], "complete": bool}. Returns {"kinds": [...], "apart": {host: why}, "method": FLEET_METHOD}:
    each kind of two or more complete nodes with its hosts, key and primary comparison's verdicts; ``apart``
    names each complete node left alone and the fields that keep it from every other."""
    groups: dict[str, list[str]] = {}
    keys: dict[str, dict] = {}
    for host, info in sorted(hosts.items()):
        if not info.get("complete") or baseline not in (info.get("results") or {}):
            continue
        key = node_kind(info["results"], baseline, info["modes"])
        text = json.dumps(key, sort_keys=True, default=str)
        groups.setdefault(text, []).append(host)
        keys[text] = key
    kinds, apart = [], {}
    for text, members in groups.items():
        if len(members) < 2:
            continue
        kinds.append(_kind(hosts, members, keys[text], baseline))
    for text, members in groups.items():
        if len(members) >= 2:
            continue
        host = members[0]
        others = [keys[t] for t in groups if t != text]
        if not others:
            apart[host] = "the only complete node of this run"
            continue
        nearest = min(others, key=lambda k: len(_differences(keys[text], k)))
        apart[host] = "its own kind: " + "; ".join(_differences(keys[text], nearest)) + " (against the nearest)"
    return {"kinds": kinds, "apart": apart, "method": FLEET_METHOD}


def _differences(mine: dict, other: dict) -> list[str]:
    return [f"{name} {mine.get(name)!r} where another has {other.get(name)!r}" for name in sorted(set(mine) | set(other))
            if mine.get(name) != other.get(name)]


def _kind(hosts: dict[str, dict], members: list[str], key: dict, baseline: str) -> dict:
    modes = hosts[members[0]]["modes"]
    spec_modes = [m for m in modes if m != baseline]
    comparisons = {m: kind_comparison({h: hosts[h]["comparisons"].get(m) or {} for h in members}, baseline, m)
                   for m in spec_modes}
    primary = comparisons[spec_modes[0]] if spec_modes else {}
    levels = [{"concurrency": r["concurrency"], "speedup": r.get("speedup"), "speedup_ci95": r.get("speedup_ci95"),
               "speedup_ci_family": r.get("speedup_ci_family"), "verdict": r.get("verdict"), "nodes": r.get("nodes")}
              for r in primary.get("levels") or []]
    return {"hosts": members, "nodes": len(members), "key": key, "spec_mode": spec_modes[0] if spec_modes else None,
            "crossover_status": primary.get("crossover_status"), "regions": primary.get("regions"),
            "recommendation": primary.get("recommendation"), "speculate_ranges": primary.get("speculate_ranges"),
            "levels": levels,
            "comparisons": {m: {"crossover_status": c.get("crossover_status"), "regions": c.get("regions"),
                                "recommendation": c.get("recommendation")} for m, c in comparisons.items()}}


def kind_comparison(by_host: dict[str, dict], base_mode: str, spec_mode: str) -> dict:
    """One comparison for a kind from its nodes' own (summarize.compare_pair's, by host): per level, the nodes'
    log speedups d_i, their mean, and an interval from their spread, exp(mean +- t(n - 1) s_d / sqrt(n)) (the
    spread holds node-to-node and launch-to-launch variation of the speedup: a node's speed that moves both
    modes alike cancels), never narrower than the nodes' own intervals' root-mean-square half-width over sqrt(n);
    a level is left out where a node has no speedup there (failed, saturated, missing: the kind is no stronger
    than its weakest node). Verdicts family-wise over the levels, as a node's are."""
    rows = []
    levels = sorted({r["concurrency"] for comp in by_host.values() for r in comp.get("levels") or []})
    for conc in levels:
        found = [next((r for r in comp.get("levels") or [] if r["concurrency"] == conc), None) for comp in by_host.values()]
        usable = [r for r in found if r and r.get("speedup") and r.get("speedup_ci95") and not r.get("saturated")
                  and r.get("verdict") in (PAYS, LOSES, UNCLEAR)]
        row = {"concurrency": conc, "nodes": len(usable), "saturated": [], "failed": None, "launches": len(usable)}
        if len(usable) < len(found) or len(usable) < 2:
            row.update(speedup=None, speedup_ci95=None, verdict=UNCLEAR,
                       why=f"{len(found) - len(usable)} of {len(found)} node(s) gave no clear-cut figure here")
            rows.append(row)
            continue
        ds = [math.log(r["speedup"]) for r in usable]
        n = len(ds)
        mean = math.fsum(ds) / n
        sd = math.sqrt(math.fsum((d - mean) ** 2 for d in ds) / (n - 1))
        between = t975(n - 1) * sd / math.sqrt(n)
        own = math.sqrt(math.fsum(log_half_width(r["speedup"], r["speedup_ci95"]) ** 2 for r in usable) / n) / math.sqrt(n)
        half = max(between, own)
        r = math.exp(mean)
        row.update(speedup=round(r, 4), speedup_ci95=[round(r * math.exp(-half), 4), round(r * math.exp(half), 4)],
                   ci_parts=[[[round(between, 6), n - 1], [round(own, 6), None]]])
        row["verdict"] = level_verdict(row["speedup"], row["speedup_ci95"])
        rows.append(row)
    family = [r for r in rows if r.get("speedup") is not None]
    m = max(1, len(family))
    for row in family:
        row["speedup_ci_family"] = family_ci(row["speedup"], row["speedup_ci95"], family_z(m), parts=row["ci_parts"],
                                             alpha_family=FAMILY_ALPHA / m, alpha_total=FAMILY_ALPHA)
        row["verdict"] = level_verdict(row["speedup"], row["speedup_ci_family"])
    cross = crossover(rows)
    measured = [float(r["concurrency"]) for r in family]
    rec = recommendation(cross, spec_mode, measured, None)
    return {"baseline_mode": base_mode, "spec_mode": spec_mode, "crossover_status": cross["status"],
            "regions": cross["regions"], "recommendation": rec["text"], "speculate_ranges": rec["speculate_ranges"],
            "levels": rows}

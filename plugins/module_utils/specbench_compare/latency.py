# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Latency percentiles per mode and level, and the latency ratio speculation / baseline per level.

Each results level carries TTFT, TPOT and end-to-end latency with p50, p90 and p99 and, per percentile,
its distribution-free 95% interval from the requests of the window (``p99_ci95``: the order statistics
whose ranks bracket n p, one value per request; specbench_client.stats.quantile_ci95). The ratio
spec / baseline of a percentile (below 1: speculation is faster there) takes the delta method on the log
scale (intervals.ratio_ci); a level measured once per mode on a node with a launch floor adds the floor's
launch variation (launch_noise); the ratios of each percentile and metric are held family-wise over the
levels (intervals.hold_family): ``faster``, ``slower`` or ``unclear``. Saturated and failed levels keep
their verdict; a level without an interval on either side (too few requests for that percentile) is
unclear.
"""

from __future__ import annotations

from .common import _interval, _num, _rnd, _rnd_pair
from .intervals import hold_family, log_half_width, ratio_ci
from .launch_noise import _add_launch_part
from .verdict import FAILED, FAMILY_ALPHA, SATURATED

FASTER, SLOWER = "faster", "slower"
# (row name, results key, percentile): the ratios compared, each its own family over the levels.
RATIOS = (("tpot_p99", "tpot_ms", "p99"), ("ttft_p99", "ttft_ms", "p99"), ("e2e_p99", "e2e_ms", "p99"))
LATENCY_METHOD = (
    "latency percentiles per request of the window, each with its distribution-free 95% interval (order statistics "
    "bracketing n p by 1.96 binomial standard deviations); ratio spec / baseline by the delta method on the log "
    "scale, the node's launch floor added for a level measured once per mode, held family-wise over the levels "
    "for each metric (Bonferroni); below 1 speculation is faster"
)


def percentile(level: dict | None, key: str, pct: str) -> tuple[float | None, list[float] | None]:
    stats = (level or {}).get(key)
    if not isinstance(stats, dict):
        return None, None
    value = _num(stats.get(pct))
    return (value if value and value > 0 else None), _interval(stats.get(f"{pct}_ci95"))


def mode_fields(level: dict | None) -> dict:
    """A mode's p99 latencies at a level, with their intervals, for summary.json."""
    out = {}
    for name, key, pct in RATIOS:
        value, ci = percentile(level, key, pct)
        out[f"{name}_ms"] = _rnd(value, 3)
        out[f"{name}_ms_ci95"] = _rnd_pair(ci, 3)
    return out


def latency_rows(rows: list[dict], levels: dict, floor: dict | None, alpha: float = FAMILY_ALPHA) -> dict:
    """Per row and RATIOS entry: ``<name>_ratio`` with ``_ci95``, ``_ci_family`` and ``_verdict``. Returns each
    family's size and the method."""
    sizes = {}
    for name, key, pct in RATIOS:
        prefix = f"{name}_ratio"
        family = []
        for row in rows:
            base, spec = levels.get(row["concurrency"], (None, None))
            row[prefix] = row[f"{prefix}_ci95"] = row[f"{prefix}_ci_family"] = None
            if row.get("verdict") in (FAILED, SATURATED):
                row[f"{prefix}_verdict"] = row["verdict"]
                continue
            (b, b_ci), (s, s_ci) = percentile(base, key, pct), percentile(spec, key, pct)
            ratio, ci = ratio_ci(s, s_ci, b, b_ci)
            row[prefix], row[f"{prefix}_ci95"] = _rnd(ratio), _rnd_pair(ci)
            if ratio is None:
                row[f"{prefix}_verdict"] = "not measured"
                continue
            parts = None
            if ci:
                scratch = {prefix: ratio, f"{prefix}_ci95": ci}
                if (row.get("launches") or 1) == 1 and _add_launch_part(scratch, prefix, floor, 2.0):
                    row[f"{prefix}_ci95"] = _rnd_pair(scratch[f"{prefix}_ci95"])
                    parts = scratch["ci_parts"]
                else:
                    parts = [[[round(log_half_width(ratio, ci), 6), None]]]
            family.append((row, parts))
        hold_family(family, prefix, alpha, FASTER, SLOWER)
        sizes[name] = len(family)
    return {"family_levels": sizes, "method": LATENCY_METHOD}

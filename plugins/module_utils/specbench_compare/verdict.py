# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Per-level verdicts (pays, loses, unclear) and the regions they form."""

from __future__ import annotations

from .common import _interval, _num

PAYS, LOSES, UNCLEAR = "pays", "loses", "unclear"
STOPS, STARTS = "stops_paying", "starts_paying"
BOOTSTRAP_DRAWS = 2000
BOOTSTRAP_SEED = 20260101  # fixed: rendering the same results twice gives the same files
Z975 = 1.959964


def level_verdict(speedup, ci) -> str | None:
    """pays (the 95% interval above 1), loses (below 1), unclear (it straddles 1); None without a speedup.

    A level without an interval is taken at its word (>= 1 pays), as an exact figure.
    """
    speedup, ci = _num(speedup), _interval(ci)
    if speedup is None:
        return None
    if ci is None:
        return PAYS if speedup >= 1.0 else LOSES
    if ci[0] > 1.0:
        return PAYS
    if ci[1] < 1.0:
        return LOSES
    return UNCLEAR


def _runs(verdicts: list[str]) -> list[list]:
    """[verdict, first index, last index] for each run of equal verdicts."""
    runs: list[list] = []
    for i, v in enumerate(verdicts):
        if runs and runs[-1][0] == v:
            runs[-1][2] = i
        else:
            runs.append([v, i, i])
    return runs


def settle_verdicts(verdicts: list[str]) -> list[str]:
    """Each level's verdict once unclear levels have been read in context.

    An unclear run between two runs of the same verdict, or at either end of the series next to
    one, takes that verdict: an unclear level never flips a verdict on its own. An unclear run
    between a paying and a losing run stays unclear (the verdict changes somewhere in it); a
    series that is unclear throughout stays unclear.
    """
    runs = _runs(verdicts)
    settled = list(verdicts)
    for n, (v, first, last) in enumerate(runs):
        if v != UNCLEAR:
            continue
        before = runs[n - 1][0] if n > 0 else None
        after = runs[n + 1][0] if n + 1 < len(runs) else None
        take = None
        if before and after and before == after:
            take = before
        elif before and not after:
            take = before
        elif after and not before:
            take = after
        if take:
            for i in range(first, last + 1):
                settled[i] = take
    return settled


def regions(points: list[tuple[float, str]]) -> list[dict]:
    """Contiguous levels with the same settled verdict: from/to concurrency, verdict, levels."""
    out = []
    for v, first, last in _runs([v for unused, v in points]):
        out.append({"from_concurrency": points[first][0], "to_concurrency": points[last][0], "verdict": v,
                    "levels": last - first + 1, "first": first, "last": last})
    return out

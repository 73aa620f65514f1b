# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What every part of the comparison shares: its options, its error, number checks, rounding."""

from __future__ import annotations

import math

SCHEMA = "specbench.compare/1"
BASELINE = "baseline"

# The options of compare_results: its action plugin validates them, and its module file (the
# documentation, which ansible-test checks against this) declares them.
ARGUMENT_SPEC = {
    "results_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "hosts": {"type": "list", "elements": "str"},
    "baseline": {"type": "str", "default": BASELINE},
    "modes": {"type": "list", "elements": "str"},
    "host_modes": {"type": "dict"},
    "outcomes": {"type": "dict"},
    "plots": {"type": "bool", "default": True},
    "dpi": {"type": "int", "default": 100},
    "index": {"type": "bool", "default": True},
    "output_match_min": {"type": "float", "default": 0.95},
    "traffic": {"type": "raw"},
    "slo": {"type": "raw", "default": {}},
    "validate_only": {"type": "bool", "default": False},
    "noise_floor_max_age_days": {"type": "float", "default": 30.0},
    "plan_launches": {"type": "str"},
    "noise_floor_min_df": {"type": "int", "default": 2},
    "plan_levels": {"type": "list", "elements": "int"},
    "noise_floor_levels": {"type": "int", "default": 2},
    "noise_floor_prior_sd": {"type": "float", "default": 0.03},
    "noise_floor_prior_df": {"type": "int", "default": 2},
    "noise_floor_key": {"type": "dict", "no_log": False},
    "max_launches": {"type": "int", "default": 0},
    "time_budget_s": {"type": "float", "default": 0.0},
    "sequential_round": {"type": "int"},
    "refine": {
        "type": "dict",
        "options": {
            "ratio": {"type": "float", "default": 1.3},
            "budget_s": {"type": "float"},
            "max_levels": {"type": "int", "default": 4},
        },
    },
}

CI_METHOD = (
    "ratio of two independent estimates, delta method on the log scale: each side's 95% interval gives a log "
    "half-width w = (ln hi - ln lo)/2; the ratio's interval is ratio * exp(+-sqrt(w_spec^2 + w_base^2))"
)
BORROWED_NOTE = "interval borrowed from the throughput interval's relative width (the client gave none)"


class CompareError(ValueError):
    """Inputs the comparison cannot use; the message names the problem and the fix."""


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
def _num(value) -> float | None:
    """A finite float, or None (bools, strings, NaN and infinities are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _interval(value) -> tuple[float, float] | None:
    """``[lo, hi]`` as a tuple of finite numbers with lo <= hi, or None."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    lo, hi = _num(value[0]), _num(value[1])
    if lo is None or hi is None or lo > hi:
        return None
    return lo, hi


def _rnd(value, digits: int = 4):
    return None if value is None else round(value, digits)


def _rnd_pair(pair, digits: int = 4):
    return None if pair is None else [_rnd(pair[0], digits), _rnd(pair[1], digits)]


def fmt_conc(value) -> str:
    """Concurrency for people: 1.29, 51.5, 120."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"

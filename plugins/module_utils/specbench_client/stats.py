# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Statistics: percentiles (numpy's linear interpolation), summaries, 95 % t-intervals."""
from __future__ import annotations

import math

T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def percentile(sorted_values, p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    n = len(sorted_values)
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * p / 100.0
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def quantile_ci95(sorted_values, p: float) -> list[float] | None:
    """The distribution-free 95 % interval of the p-th percentile from n values, one per request: the
    order statistics x_(l) and x_(u) whose ranks bracket n p by 1.96 binomial standard deviations
    (normal approximation, with a continuity step outward). None when those ranks fall outside the
    sample: too few requests to bound that percentile (a p99 needs about 600)."""
    n = len(sorted_values)
    q = p / 100.0
    sd = math.sqrt(n * q * (1.0 - q))
    lo = math.floor(n * q - 1.959964 * sd) - 1
    hi = math.ceil(n * q + 1.959964 * sd)
    if lo < 0 or hi > n - 1 or sd == 0:
        return None
    return [float(sorted_values[lo]), float(sorted_values[hi])]


def summary(values, scale: float = 1.0, digits: int = 3, ci: bool = False) -> dict | None:
    """mean, p50, p90, p99 (times ``scale``), or None without values; with ``ci`` also the
    95 % t-interval of the mean and each percentile's distribution-free 95 % interval
    (``p50_ci95`` ...: quantile_ci95; for one value per request)."""
    if not values:
        return None
    ordered = sorted(values)
    mean = math.fsum(ordered) / len(ordered)
    out = {
        "mean": round(mean * scale, digits),
        "p50": round(percentile(ordered, 50) * scale, digits),
        "p90": round(percentile(ordered, 90) * scale, digits),
        "p99": round(percentile(ordered, 99) * scale, digits),
    }
    if ci:
        interval = mean_ci95(ordered)[1]
        out["mean_ci95"] = [round(interval[0] * scale, digits), round(interval[1] * scale, digits)] if interval else None
        for p in (50, 90, 99):
            bounds = quantile_ci95(ordered, p)
            out[f"p{p}_ci95"] = [round(bounds[0] * scale, digits), round(bounds[1] * scale, digits)] if bounds else None
    return out


def t975(df: int) -> float:
    if df < 1:
        return float("nan")
    return T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df


def t_abs_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t on a whole number of degrees of freedom, exact (Abramowitz and
    Stegun 26.7.3 for odd df, 26.7.4 for even: finite sums in theta = atan(t / sqrt(df)))."""
    if t <= 0:
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term = total = 1.0
        for j in range(1, df // 2):
            term *= c2 * (2 * j - 1) / (2 * j)
            total += term
        return s * total
    if df == 1:
        return 2 * theta / math.pi
    term = total = math.cos(theta)
    for j in range(1, (df - 1) // 2):
        term *= c2 * (2 * j) / (2 * j + 1)
        total += term
    return 2 / math.pi * (theta + s * total)


def t_two_sided(alpha: float, df: int | None = None) -> float:
    """The critical value t with P(|T_df| > t) = ``alpha``: Student's t on ``df`` whole degrees of freedom
    (t_abs_cdf, solved by bisection), the normal's for ``df`` None or above 1000. t_two_sided(0.05, 1) = 12.71;
    a family of 8 intervals at 5%, t_two_sided(0.05 / 8, 2) = 12.59 where 1.96-scaling would give 5.99."""
    if df is None or df > 1000:
        from statistics import NormalDist
        return NormalDist().inv_cdf(1.0 - alpha / 2.0)
    df = max(1, int(df))
    lo, hi = 0.0, 1.0
    while t_abs_cdf(hi, df) < 1.0 - alpha:
        lo, hi = hi, hi * 2.0
    for _step in range(100):
        mid = (lo + hi) / 2.0
        if t_abs_cdf(mid, df) < 1.0 - alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9 * hi:
            break
    return (lo + hi) / 2.0


def t975_fractional(df: float) -> float:
    """t975 at a fractional number of degrees of freedom: linear in 1 / df between the whole
    numbers around it (1.8 degrees of freedom: 5.2, where t975(1) would give 12.7)."""
    lo = max(1, int(df))
    if df <= lo:
        return t975(lo)
    w = (1 / lo - 1 / df) / (1 / lo - 1 / (lo + 1))
    return t975(lo) + w * (t975(lo + 1) - t975(lo))


def mean_ci95(samples: list[float]) -> tuple[float, list[float] | None]:
    """Mean and its 95 % t-interval; no interval from fewer than two samples."""
    n = len(samples)
    mean = math.fsum(samples) / n if n else 0.0
    if n < 2:
        return mean, None
    var = math.fsum((x - mean) ** 2 for x in samples) / (n - 1)
    half = t975(n - 1) * math.sqrt(var / n)
    return mean, [mean - half, mean + half]


def integrated_autocorr_time(samples) -> float:
    """tau = 1 + 2 * sum of autocorrelations, by Geyer's initial positive sequence (at least 1).

    Sums of autocovariances at lags (2m, 2m + 1) are added while positive and made non-increasing:
    a consistent, conservative estimate for stationary, reversible series such as a closed-loop
    server's token rate.
    """
    n = len(samples)
    if n < 4:
        return 1.0
    mean = math.fsum(samples) / n
    dev = [x - mean for x in samples]
    gamma0 = math.fsum(d * d for d in dev) / n
    if gamma0 <= 0:
        return 1.0

    def gamma(lag):
        return math.fsum(dev[i] * dev[i + lag] for i in range(n - lag)) / n

    total, last, m = -gamma0, math.inf, 0
    while 2 * m + 1 < n // 2:
        pair = gamma(2 * m) + gamma(2 * m + 1)
        if pair <= 0:
            break
        pair = min(pair, last)
        total += 2 * pair
        last, m = pair, m + 1
    return max(1.0, total / gamma0)


def ess_mean_ci95(samples, max_effective: float | None = None) -> tuple[float, list[float] | None, float]:
    """Mean, its 95 % interval for autocorrelated samples, and the effective sample size.

    n_eff = n / tau (``integrated_autocorr_time``), capped at ``max_effective`` when given (the
    number of independent stretches the caller knows the series holds); the interval is
    mean +- t(n_eff - 1) * s / sqrt(n_eff). No interval from fewer than two samples.
    """
    n = len(samples)
    mean = math.fsum(samples) / n if n else 0.0
    if n < 2:
        return mean, None, float(n)
    tau = integrated_autocorr_time(samples)
    n_eff = n / tau
    if max_effective is not None:
        n_eff = min(n_eff, max_effective)
    n_eff = max(2.0, n_eff)
    var = math.fsum((x - mean) ** 2 for x in samples) / (n - 1)
    half = t975(max(1, int(n_eff) - 1)) * math.sqrt(var / n_eff)
    return mean, [mean - half, mean + half], n_eff


# Degrees of freedom per non-overlapping batch beyond the first. Meketon and Schmeiser's 1.5 assumes
# batches much longer than the correlation; with batches of BATCH_TAUS correlation times estimated
# from the same window, 1.0 (the non-overlapping count) is what held in the coverage simulation
# (tests/unit/plugins/module_utils/specbench_client/test_level_intervals.py).
OBM_DF = 1.0


def overlapping_batch_means_ci95(samples, batch: int) -> tuple[float, list[float] | None, float]:
    """Mean, its 95 % interval by overlapping batch means, and the interval's degrees of freedom.

    Every run of ``batch`` consecutive samples is a batch (n - b + 1 of them); the variance of
    the mean is ``b / ((n - b + 1) (n - b)) * sum((batch mean - mean) ** 2)`` (Meketon and
    Schmeiser 1984), with OBM_DF * (n / b - 1) degrees of freedom. It holds for autocorrelated
    samples once batches are several correlation times long (``batch_length``). No interval
    with fewer than two batches' worth of samples.
    """
    n = len(samples)
    mean = math.fsum(samples) / n if n else 0.0
    b = int(batch)
    if b < 1 or n < 2 * b:
        return mean, None, 0.0
    var_mean = obm_variance(_prefix_sums(samples), b, mean)
    df = max(1.0, OBM_DF * (n / b - 1))
    half = t975_fractional(df) * math.sqrt(var_mean)
    return mean, [mean - half, mean + half], df


def _prefix_sums(samples) -> list[float]:
    prefix = [0.0]
    for x in samples:
        prefix.append(prefix[-1] + x)
    return prefix


def obm_variance(prefix: list[float], b: int, mean: float) -> float:
    """The overlapping-batch-means variance of the mean (Meketon and Schmeiser 1984) at batch
    length ``b`` (1 <= b < n), from the samples' prefix sums (``prefix[i]``: the sum of the first i)."""
    n = len(prefix) - 1
    spread = math.fsum(((prefix[j + b] - prefix[j]) / b - mean) ** 2 for j in range(n - b + 1))
    return b * spread / ((n - b + 1) * (n - b))


# Batches at least this many integrated correlation times long (their lag-one correlation is then
# about 1 / (2 * BATCH_TAUS)); longer batches leave too few of them in a window for the variance
# (3 and 4 covered less than 2 in the coverage simulation).
BATCH_TAUS = 2
# A window holding fewer correlation times than this cannot see its own slower swings: warn.
MIN_CORRELATION_TIMES = 12
# The longest batch the correlation time's bound looks at, as a fraction of the window: a window
# holding MIN_CORRELATION_TIMES correlation times (the fewest it may hold unwarned) has batches of
# BATCH_TAUS of them, a sixth of the window; longer ones belong to windows that are warned of anyway.
BOUND_BATCHES = MIN_CORRELATION_TIMES // BATCH_TAUS
# Degrees of freedom of the overlapping-batch-means variance per non-overlapping batch beyond the
# first, at a fixed batch length much longer than the correlation (Meketon and Schmeiser 1984): the
# bound's chi-square. (OBM_DF, 1.0, is the interval's, whose batch length comes from the same window.)
OBM_DF_FIXED = 1.5
# The bound's confidence, one-sided: that of the 95 % interval's upper side.
BOUND_Z = 1.645


def chi2_lower(df: float) -> float:
    """The one-sided BOUND_Z (5 %) quantile of chi-square with ``df`` degrees of freedom, by Wilson
    and Hilferty's cube-root normal approximation (within 0.5 % from the 7.5 degrees of freedom the
    bound's longest batch has; 7 % low at 3)."""
    c = 2.0 / (9.0 * df)
    return df * max(1e-6, 1.0 - c - BOUND_Z * math.sqrt(c)) ** 3


def correlation_time_bound(samples, batch: int) -> float:
    """An upper 95 % confidence bound on the integrated correlation time (in samples) that
    batches from ``batch`` samples up to a BOUND_BATCHES-th of the window see.

    Batches of b samples see tau_b = n * Var_OBM(b) / s ** 2 (the variance of the mean by
    overlapping batch means against the samples' own variance s ** 2), that is 1 + 2 * the sum
    over lags under b of (1 - lag / b) * rho(lag), which rises to tau as b outgrows the
    correlation. Its estimate has OBM_DF_FIXED * (n / b - 1) degrees of freedom, so
    tau_b * df / chi2_lower(df) is its one-sided 95 % upper bound. The bound is the largest of
    these over batch lengths doubling from ``batch``: where a window's slow swings (a drift
    correlated over many requests) make its longer batches vary more than ``batch`` allowed for,
    the bound grows with them. 0.0 when no batch from ``batch`` up to n / BOUND_BATCHES fits.
    """
    n = len(samples)
    if n < 2:
        return 0.0
    mean = math.fsum(samples) / n
    var0 = math.fsum((x - mean) ** 2 for x in samples) / n
    if var0 <= 0:
        return 0.0
    prefix = _prefix_sums(samples)
    bound, b = 0.0, max(1, int(batch))
    while b * BOUND_BATCHES <= n:
        df = OBM_DF_FIXED * (n / b - 1)
        tau_b = n * obm_variance(prefix, b, mean) / var0
        bound = max(bound, tau_b * df / chi2_lower(df))
        b *= 2
    return bound


def batch_length(samples, floor: int = 1) -> tuple[int, float, float]:
    """(batch length in samples, the integrated autocorrelation time tau in samples by Geyer's
    initial positive sequence, its upper bound by ``correlation_time_bound``).

    Geyer's estimate from a window holding few correlation times runs low: its autocovariances are
    taken about the window's own mean (each is low by about the mean's variance, tau / n of the
    variance, summed over every lag it keeps) and its sum stops at the first pair of lags that
    noise makes negative; an interval from batches of BATCH_TAUS such estimates is too narrow. So
    the batch is BATCH_TAUS times the bound, computed from batches of BATCH_TAUS times Geyer's
    estimate (and at least ``floor`` samples, e.g. one request duration: rates less than a request
    apart share most of their requests) up to a sixth of the window: where the window pins its
    correlation down the longer batches agree and the bound stays within the chi-square's reach of
    the estimate (white noise over 50 or 250 samples: 1.3 to 3 times it, 1.9 to 2.2 in the median,
    mostly from the longest batch's 7.5 degrees of freedom), where it does not the batches, and the
    interval, widen."""
    tau = integrated_autocorr_time(samples)
    first = max(1, int(floor), int(math.ceil(BATCH_TAUS * tau)))
    bound = max(tau, correlation_time_bound(samples, first))
    return max(first, int(math.ceil(BATCH_TAUS * bound))), tau, bound

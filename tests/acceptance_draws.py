"""The emulator's acceptance draw worked out on paper, for the tests that hold accept lengths and
speculative rates to it: each verify step gains 1 + the consecutive accepted draft tokens, at most
``steps`` + 1, each accepted with probability ``q_eff`` (files/sglang_emulator/model.py,
draw_accept). Computed here from that rule alone, not from the emulator's own functions, so a test
that uses them does not pass because the emulator reads its own model."""
from __future__ import annotations

import math


def step_gains(q_eff: float, steps: int) -> list[float]:
    """P(one verify step gains k tokens), k = 1 .. steps + 1."""
    return [q_eff ** (k - 1) * (1 - q_eff) for k in range(1, steps + 1)] + [q_eff**steps]


def accept_cv(q_eff: float, steps: int) -> float:
    """Coefficient of variation of one verify step's tokens."""
    probs = step_gains(q_eff, steps)
    mean = sum(k * p for k, p in enumerate(probs, 1))
    return math.sqrt(sum((k - mean) ** 2 * p for k, p in enumerate(probs, 1))) / mean


def verify_steps(q_eff: float, steps: int, tokens: int) -> tuple[float, float]:
    """Mean and standard deviation of the verify steps one request takes to decode ``tokens``
    tokens (its last step is cut to what the request still needs). Exact, by the recursion over
    the tokens still to go; a 100,000-request simulation of draw_accept matches it to 0.04 %."""
    gains = step_gains(q_eff, steps)
    m1, m2 = [0.0] * (tokens + 1), [0.0] * (tokens + 1)
    for left in range(1, tokens + 1):
        after = [(p, max(0, left - k)) for k, p in enumerate(gains, 1)]
        m1[left] = 1 + sum(p * m1[rest] for p, rest in after)
        m2[left] = 1 + sum(p * (2 * m1[rest] + m2[rest]) for p, rest in after)
    return m1[tokens], math.sqrt(max(0.0, m2[tokens] - m1[tokens] ** 2))


def accept_length_band(level: dict, truth: dict, output_len: int, z: float = 4.5) -> tuple[float, float, int]:
    """The accept length a sweep level's source must read, and how far it may sit from it: each
    request yields ``output_len`` tokens (the first from its prefill) over its verify steps, and the
    source sums both over the n requests it covers (a per-request source names n; the engine's counters
    cover the requests finished between the client's two /metrics reads inside the window, at least
    the server's tokens over those reads / output_len, which makes the band no narrower than it
    should be). ``z`` standard errors of the ratio of those sums (4.5: a one-in-150,000 miss).
    ``truth`` is the emulator's GET /emulator/analytic for the level (accept_q_eff, draft_steps)."""
    mean_v, sd_v = verify_steps(truth["accept_q_eff"], truth["draft_steps"], output_len - 1)
    source = level["accept_length_source"]
    if " per request:" in source and "requests finished in the window" in source:
        # Per request (the native API's spec_verify_ct, SGLang's sglext.spec_tokens_details on chat and
        # completions): the source names the requests it sums over.
        n = int(source.split("over the ")[1].split(" requests")[0])
    else:
        n = int(level["server_count_check"]["server_tokens"] // output_len)
    assert n >= 2, (source, level["server_count_check"])
    expected = output_len / mean_v
    return expected, z * expected * sd_v / mean_v / math.sqrt(n), n

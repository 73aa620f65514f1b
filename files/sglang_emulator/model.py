"""The emulator's performance model: what one scheduler iteration costs, and the truth.

A forward pass over ``n`` tokens costs a roofline::

    T(n) = t_fixed + max(t_mem, n * t_tok)

``t_fixed`` is launch and all-reduce latency, ``t_mem`` the time to stream the weights once
(small batches are memory-bound and cost the same whatever ``n``), ``n * t_tok`` the
compute and KV-read time once the batch is large enough to be compute-bound.

* Plain decode of a running batch of ``b`` requests is one pass over ``b`` tokens: each
  request gains one token per step.
* A speculative step with ``s`` draft steps, top-k ``k`` and ``d`` draft tokens costs the
  draft model's ``s * (e0 + e1 * b * k)`` plus one verify pass over ``b * d`` tokens. Each
  request gains a random number of tokens, ``1 + min(G, s)``, where ``G`` counts
  consecutive accepted draft tokens, each accepted with probability ``q`` (a tree of top-k
  branches accepts with ``1 - (1 - q) ** k``). The mean, ``sum(q_eff ** j, j = 0..s)``,
  is SGLang's accept length. Speculation wins while the verify pass stays memory-bound and
  loses once ``b * d`` tokens make it compute-bound: the crossover this project measures.
* Prefill of ``n`` prompt tokens costs ``t_prefill_fixed + n * t_prefill_tok``, runs as its
  own iteration (no mixed batches) and yields each request's first token.
* Admission: at most ``max_running_requests`` run at once and their prompt plus output
  tokens must fit the KV pool; others queue.

``steady_state`` gives the closed-loop output throughput at concurrency ``C`` that the
scheduler converges to, for tests and benchmarks to hold measurements against.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class SpecConfig:
    """Speculative settings resolved from the launch flags (None for plain decode)."""

    algorithm: str
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    q: float  # per-draft-token acceptance probability of this algorithm on this profile
    e0: float  # draft cost per draft step, seconds
    e1: float  # draft cost per request per branch per draft step, seconds
    adaptive_table: tuple[tuple[int, tuple[int, ...]], ...] | None = None


@dataclass(frozen=True)
class Costs:
    t_fixed: float
    t_mem: float
    t_tok: float
    t_prefill_fixed: float
    t_prefill_tok: float

    def forward(self, n_tokens: int) -> float:
        """Seconds for one forward pass over ``n_tokens`` tokens (the roofline)."""
        return self.t_fixed + max(self.t_mem, n_tokens * self.t_tok)

    def prefill(self, n_tokens: int) -> float:
        return self.t_prefill_fixed + n_tokens * self.t_prefill_tok


def q_effective(q: float, topk: int) -> float:
    return 1.0 - (1.0 - q) ** max(1, topk)


def mean_accept_length(q_eff: float, steps: int) -> float:
    """Expected tokens gained per request per speculative step (bonus token included)."""
    return sum(q_eff**j for j in range(steps + 1))


def draw_accept(rng: random.Random, q_eff: float, steps: int) -> int:
    """One request's tokens from one verify step: 1 + consecutive accepts, at most steps."""
    accepted = 1
    while accepted <= steps and rng.random() < q_eff:
        accepted += 1
    return accepted


def step_choice(costs: Costs, spec: SpecConfig | None, batch: int) -> int:
    """Draft steps used for a step at this batch size: 0 is plain decode.

    Fixed speculation always uses its configured steps. With --speculative-adaptive the
    candidates come from the table row for this batch size, and the emulator picks the one
    its own model says is fastest (SGLang picks from measured acceptance; same intent).
    """
    if spec is None:
        return 0
    if spec.adaptive_table is None:
        return spec.num_steps
    candidates = spec.adaptive_table[0][1]  # below every key: the smallest row
    for threshold, row in spec.adaptive_table:
        if batch >= threshold:
            candidates = row
    return max(candidates, key=lambda s: tokens_per_second_in_step(costs, spec, batch, s))


def step_cost(costs: Costs, spec: SpecConfig | None, batch: int, steps: int) -> float:
    if spec is None or steps == 0:
        return costs.forward(batch)
    draft_tokens = draft_tokens_for(spec, steps)
    draft = steps * (spec.e0 + spec.e1 * batch * spec.eagle_topk)
    return draft + costs.forward(batch * draft_tokens)


def draft_tokens_for(spec: SpecConfig, steps: int) -> int:
    """Draft tokens verified per request at ``steps`` (adaptive with top-k 1: steps + 1)."""
    if steps == spec.num_steps:
        return spec.num_draft_tokens
    return steps + 1


def tokens_per_second_in_step(costs: Costs, spec: SpecConfig | None, batch: int, steps: int) -> float:
    if spec is None or steps == 0:
        return batch / costs.forward(batch)
    gain = mean_accept_length(q_effective(spec.q, spec.eagle_topk), steps)
    return batch * gain / step_cost(costs, spec, batch, steps)


@functools.lru_cache(maxsize=4096)
def expected_steps(tokens: int, q_eff: float, steps: int) -> float:
    """Expected speculative steps to produce ``tokens`` tokens (the last step truncated).

    Exact, by the renewal recursion E[n] = 1 + sum_k P(K=k) E[n-k], E[n<=0] = 0.
    """
    probs = [(q_eff ** (k - 1)) * ((1 - q_eff) if k <= steps else 1.0) for k in range(1, steps + 2)]
    table = [0.0] * (tokens + 1)
    for n in range(1, tokens + 1):
        table[n] = 1.0 + sum(p * table[max(0, n - k)] for k, p in enumerate(probs, start=1))
    return table[tokens]


def running_batch(concurrency: int, max_running: int, kv_capacity_tokens: int, input_len: int, output_len: int) -> int:
    per_request = input_len + output_len
    kv_fit = max(1, kv_capacity_tokens // per_request) if per_request > 0 else concurrency
    return max(1, min(concurrency, max_running, kv_fit))


def steady_state(
    costs: Costs,
    spec: SpecConfig | None,
    concurrency: int,
    input_len: int,
    output_len: int,
    max_running: int,
    kv_capacity_tokens: int,
) -> dict:
    """Closed-loop steady state at ``concurrency`` streams, in model seconds.

    With ``b`` requests running, each request costs its prefill (alone: closed-loop arrivals
    are staggered) plus its share of the decode steps that produce its other tokens:
    ``R = 1 / (prefill(L_in) + steps(L_out - 1) * step_cost(b) / b)`` completions per second,
    and output throughput ``R * L_out``.
    """
    batch = running_batch(concurrency, max_running, kv_capacity_tokens, input_len, output_len)
    steps = step_choice(costs, spec, batch)
    decode_tokens = max(0, output_len - 1)
    if spec is None or steps == 0:
        n_steps = float(decode_tokens)
        accept = None
    else:
        q_eff = q_effective(spec.q, spec.eagle_topk)
        n_steps = expected_steps(decode_tokens, round(q_eff, 12), steps)
        accept = mean_accept_length(q_eff, steps)
    per_request = costs.prefill(input_len) + n_steps * step_cost(costs, spec, batch, steps) / batch
    rate = 1.0 / per_request
    return {
        "concurrency": concurrency,
        "running": batch,
        "queued": max(0, concurrency - batch),
        "draft_steps": steps,
        "accept_length": accept,
        "request_per_s": rate,
        "output_tok_per_s": rate * output_len,
        "per_stream_tok_per_s": rate * output_len / batch,
        "step_s": step_cost(costs, spec, batch, steps),
    }


def crossover(
    costs: Costs, spec: SpecConfig, input_len: int, output_len: int, max_running: int, kv_capacity_tokens: int, limit: int = 4096
) -> float | None:
    """Smallest concurrency (interpolated on a log scale) where speculation stops paying."""
    lo_c, lo_r = 0, 0.0  # the last level where speculation still paid (none yet)
    for c in range(1, limit + 1):
        args = (c, input_len, output_len, max_running, kv_capacity_tokens)
        ratio = steady_state(costs, spec, *args)["output_tok_per_s"] / steady_state(costs, None, *args)["output_tok_per_s"]
        if ratio < 1.0:
            if lo_c == 0:
                return None
            frac = (lo_r - 1.0) / (lo_r - ratio)
            return math.exp(math.log(lo_c) + frac * (math.log(c) - math.log(lo_c)))
        lo_c, lo_r = c, ratio
    return math.inf

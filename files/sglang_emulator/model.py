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
* Mixture of experts (profiles with ``moe_experts``): a pass streams the dense weights plus the
  experts its tokens touch, E(n) = N (1 - (1 - k/N)^n), so verifying b * d draft tokens reads
  more experts than decoding b tokens until both touch nearly all of them.
* --speculative-adaptive: the step count comes from the table row for the running batch and the
  per-draft acceptance the server has observed (``AdaptiveState``), never from these costs, so
  a wrong table makes the adaptive mode wrong, as it would make SGLang's.

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
    category_q: tuple[tuple[str, float], ...] = ()  # per category of request (profiles.CATEGORY_ACCEPT_Q)


def expert_union(n_tokens: int, experts: int, per_token: int) -> float:
    """Expected distinct experts ``n_tokens`` tokens touch, each routed to ``per_token`` of ``experts``.

    E(n) = N * (1 - (1 - k / N) ** n): one token reads k experts' weights, a batch reads the union.
    """
    if experts <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - per_token / experts) ** max(0, n_tokens))


@dataclass(frozen=True)
class Costs:
    t_fixed: float
    t_mem: float
    t_tok: float
    t_prefill_fixed: float
    t_prefill_tok: float
    # Mixture of experts (0: dense): streaming every expert's weights once costs t_mem_experts, and
    # a pass reads only the experts its tokens touch (expert_union), on top of t_mem (the dense part).
    moe_experts: int = 0
    moe_per_token: int = 0
    t_mem_experts: float = 0.0

    def memory(self, n_tokens: int) -> float:
        """Seconds to stream the weights a pass over ``n_tokens`` tokens reads."""
        if not self.moe_experts:
            return self.t_mem
        touched = expert_union(n_tokens, self.moe_experts, self.moe_per_token)
        return self.t_mem + self.t_mem_experts * touched / self.moe_experts

    def forward(self, n_tokens: int) -> float:
        """Seconds for one forward pass over ``n_tokens`` tokens (the roofline)."""
        return self.t_fixed + max(self.memory(n_tokens), n_tokens * self.t_tok)

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


# How the adaptive mode picks its step count (SGLang's --speculative-adaptive, by intent): from the
# row of the table for the running batch size, and the acceptance it has observed, never from
# costs. A draft step is worth running while its token is accepted at least ADAPTIVE_KEEP of the
# time (q^s >= ADAPTIVE_KEEP); 0 (plain decode) is chosen when the row offers nothing else, or
# offers it and the observed per-draft acceptance is below ADAPTIVE_OFF.
ADAPTIVE_KEEP = 0.15
ADAPTIVE_OFF = 0.15
ADAPTIVE_EMA = 0.1  # weight of one step's observation in the running acceptance estimate


def table_row(table, batch: int) -> tuple[int, ...]:
    """The candidate steps of the row for ``batch`` (the largest key <= batch; below every key the first)."""
    candidates = table[0][1]
    for threshold, row in table:
        if batch >= threshold:
            candidates = row
    return tuple(candidates)


def adaptive_steps(table, batch: int, q_hat: float | None, current: int) -> int:
    """The step count the adaptive mode uses at ``batch``, given its acceptance estimate ``q_hat``.

    Without an estimate yet it keeps the candidate nearest ``current`` (the launch's steps).
    """
    row = table_row(table, batch)
    if len(row) == 1:
        return row[0]
    if q_hat is None:
        return min(row, key=lambda s: (abs(s - current), s))
    positive = sorted(s for s in row if s > 0)
    if 0 in row and (not positive or q_hat < ADAPTIVE_OFF):
        return 0
    worth = [s for s in positive if q_hat**s >= ADAPTIVE_KEEP]
    return max(worth) if worth else positive[0]


class AdaptiveState:
    """The adaptive mode's running acceptance estimate and its step choice (one per server)."""

    def __init__(self, spec: SpecConfig):
        self.spec = spec
        self.q_hat: float | None = None
        self.current = spec.num_steps

    def choose(self, batch: int) -> int:
        self.current = adaptive_steps(self.spec.adaptive_table, batch, self.q_hat, self.current)
        return self.current

    def observe(self, accepted: int, attempted: int) -> None:
        """One step's draws: draft tokens accepted out of draft positions tried (a geometric's MLE)."""
        if attempted <= 0:
            return
        seen = accepted / attempted
        self.q_hat = seen if self.q_hat is None else (1 - ADAPTIVE_EMA) * self.q_hat + ADAPTIVE_EMA * seen


def step_choice(costs: Costs, spec: SpecConfig | None, batch: int) -> int:
    """Draft steps used for a step at this batch size in the steady state: 0 is plain decode.

    Fixed speculation always uses its configured steps. With --speculative-adaptive the step
    count is what the adaptive mode settles on once its acceptance estimate has converged to
    the true acceptance (``adaptive_steps``): chosen from the table and the acceptance, never
    from the costs, so a wrong table makes it wrong. ``costs`` is not consulted.
    """
    del costs
    if spec is None:
        return 0
    if spec.adaptive_table is None:
        return spec.num_steps
    return adaptive_steps(spec.adaptive_table, batch, q_effective(spec.q, spec.eagle_topk), spec.num_steps)


def step_cost(costs: Costs, spec: SpecConfig | None, batch: int, steps: int) -> float:
    if spec is None or steps == 0:
        return costs.forward(batch)
    draft_tokens = draft_tokens_for(spec, steps)
    draft = steps * (spec.e0 + spec.e1 * batch * spec.eagle_topk)
    return draft + costs.forward(batch * draft_tokens)


def step_tokens(spec: SpecConfig | None, batch: int, steps: int) -> int:
    """Tokens the step's main forward pass computes (what its power follows, gpus.PowerModel):
    the batch for plain decode, batch times the draft tokens for a verify pass."""
    if spec is None or steps == 0:
        return batch
    return batch * draft_tokens_for(spec, steps)


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
        "prefill_s": costs.prefill(input_len),
        "accept_q_eff": None if accept is None else q_eff,
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

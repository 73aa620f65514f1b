"""Continuous batching: the scheduler loop that turns the model's costs into time.

One asyncio task plays SGLang's scheduler. Each iteration is either a prefill of newly
admitted requests (prefill first, as SGLang schedules) or one decode/verify step over the
running batch; the loop sleeps for the iteration's modelled cost on an absolute schedule
(so late wake-ups do not accumulate), then hands each request its new tokens through its
sink. Sinks write straight to the client's socket: no per-token task switches, so one
core serves hundreds of streams.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import random
import time

from sglang_emulator import model

LOG = logging.getLogger("sglang")
TP0 = {"tp": " TP0"}
VOCAB = (
    "the of and to in is was that for on as with by at from his an were are which this be "
    "or has had not but one their its first new after also who two they have more been than "
    "other into over all time there years would can only most some may any such these made "
    "world between through under during three while where city part state well used both each "
    "high number early known called much around since however about many several those long "
    "second including well system later against being well group same area work life war"
).split()
MAX_LAG_S = 0.25  # behind schedule by more than this: resync instead of bursting
# The schedule time given up at each resync is counted (``schedule_lost_s``) and shown on /metrics
# under an emulator-only name (metrics.py, LOST_NAME): no real engine has a schedule to fall behind,
# so a client reads it only to ask whether this machine kept the emulator's pace (the client's
# keepup.schedule_reasons). Lateness up to MAX_LAG_S is caught up by the next steps while the batch
# runs; what is left of it when the engine goes idle is not, and is counted then.


class QueueFull(Exception):
    pass


class Request:
    __slots__ = (
        "aborted",
        "created",
        "diverge_at",
        "finish_reason",
        "finished_at",
        "first_token_at",
        "generated",
        "input_len",
        "kv_reserved",
        "last_emit",
        "max_new",
        "q_eff",
        "rank",
        "rid",
        "sink",
        "spec_accepted",
        "spec_hist",
        "stop_at",
        "tokens",
        "verify_ct",
    )

    def __init__(self, rid: str, input_len: int, max_new: int, stop_at: int, sink):
        self.rid = rid
        self.input_len = input_len
        self.max_new = max_new
        self.stop_at = stop_at  # tokens after which the request ends (max_new, or an EOS draw)
        self.sink = sink  # .on_tokens(req, new_ids) and .on_finish(req)
        self.generated: list[int] = []
        self.verify_ct = 0
        self.spec_accepted = 0
        self.spec_hist: list[int] = []  # verify steps by draft tokens accepted (bonus excluded)
        self.created = time.monotonic()
        self.first_token_at = None
        self.finished_at = None
        self.last_emit = None
        self.finish_reason = None
        self.aborted = False
        self.kv_reserved = 0
        self.rank = 0  # the DP rank (scheduler) that serves it
        self.tokens = None  # the output's own token stream (Engine.new_request)
        self.diverge_at = None  # position from which an injected mismatch changes the output
        self.q_eff = None  # its per-draft acceptance (the engine's, or its category's)


class Engine:
    def __init__(self, cfg: dict, metrics):
        args = cfg["args"]
        self.costs = cfg["costs"]
        self.spec = cfg["spec"]
        # --emulator-launch-sd: this launch's own speed (cli.launch_factor) stretches every modelled duration.
        self.scale = args.emulator_time_scale * (getattr(args, "emulator_launch_factor", 1.0) or 1.0)
        self.max_running = cfg["max_running_requests"]
        self.max_queued = args.max_queued_requests
        self.kv_capacity = cfg["kv_capacity_tokens"]
        self.chunk = args.chunked_prefill_size
        self.context_length = cfg["context_length"]
        self.graph_bs = args.cuda_graph_max_bs_decode or 160
        self.log_interval = max(1, args.decode_log_interval)
        self.metrics = metrics
        self.rng = random.Random(args.emulator_seed)
        self.seed = args.emulator_seed
        self.mismatch = getattr(args, "emulator_output_mismatch", 0.0) or 0.0
        self.q_eff = model.q_effective(self.spec.q, self.spec.eagle_topk) if self.spec else None
        # Each category's own acceptance (profiles.CATEGORY_ACCEPT_Q), for requests whose text names one.
        self.q_by_category = ({cat: model.q_effective(q, self.spec.eagle_topk) for cat, q in self.spec.category_q}
                              if self.spec else {})
        # --speculative-adaptive: the step count follows the acceptance observed, row by row.
        self.adaptive = model.AdaptiveState(self.spec) if self.spec and self.spec.adaptive_table else None
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.kv_used = 0
        self.wake = asyncio.Event()
        self.ids = itertools.count()
        self.decode_steps = 0
        self.emitted_tokens = 0  # every token as emitted (GET /emulator/counters)
        self.lag_resyncs = 0
        self.schedule_lost_s = 0.0  # wall-clock seconds given up at those resyncs and at going idle late
        self.behind_s = 0.0  # how late the last step ran against the schedule (caught up while busy)
        # The modelled seconds of every prefill and decode step emitted (time scale applied): a
        # window's rise is the time the engine ran its schedule. It only grows, so reads either side
        # of an edge bound it there, which behind_s (as of the last wake; a stall not yet woken from
        # is in neither) cannot.
        self.scheduled_s = 0.0
        self.idle_s = 0.0  # wall-clock seconds with nothing waiting or running, finished stretches
        self.idle_since: float | None = None  # when the current idle stretch began (None: busy)
        self.decode_batch_sum = 0  # requests decoded, summed over decode steps (their mean batch)
        # Accept length per DP rank, as SGLang's scheduler keeps it
        # (srt/managers/scheduler_components/metrics_reporter.py): tokens and verify steps
        # accumulate per step, and fold into the lifetime totals only when the decode log fires
        # (every --decode-log-interval decode batches); /flush_cache resets both.
        self.ranks = max(1, args.dp_size) * max(1, args.attn_dp_size)
        self.rank_ids = itertools.count()
        self.spec_tokens = [0] * self.ranks  # since the last decode log
        self.spec_verify = [0] * self.ranks
        self.spec_total_tokens = [0] * self.ranks  # folded at each decode log, until a flush
        self.spec_total_verify = [0] * self.ranks
        self.gauge_accept = 0.0
        self.gauge_accept_rate = 0.0
        self.interval_tokens = 0
        self.interval_start = time.monotonic()
        self.last_gen_throughput = 0.0
        self.telemetry = None  # gpus.Telemetry once the server has its GPUs: each step's power

    # -- admission -------------------------------------------------------------------
    def new_request(self, input_len: int, max_new: int | None, ignore_eos: bool, sink, prompt=None,
                    category: str | None = None) -> Request:
        """A request; ``prompt`` (its text, messages or ids as sent) fixes its output: the same
        prompt gives the same tokens in every mode, as greedy decoding and greedy verification do
        (SGLang's EAGLE verify commits the target's argmax when all requests are greedy:
        srt/speculative/eagle_utils.py, _verify_uses_greedy). ``category`` (read from the prompt
        text by api.py) picks its per-draft acceptance."""
        if max_new is None:
            max_new = max(1, self.context_length - input_len)
        stop_at = max_new
        if not ignore_eos:
            # The model emits EOS after a random length (mean 180 tokens), as real outputs end.
            stop_at = min(max_new, 1 + int(self.rng.expovariate(1 / 180)))
        req = Request(f"{next(self.ids):x}", input_len, max_new, stop_at, sink)
        req.rank = next(self.rank_ids) % self.ranks  # the DP controller's round robin
        key = f"{self.seed}:{prompt if prompt is not None else req.rid}"
        req.tokens = random.Random(key)
        if self.spec and self.mismatch > 0:
            pick = random.Random(f"{key}:mismatch")
            if pick.random() < self.mismatch:
                req.diverge_at = pick.randrange(max(1, stop_at))
        req.q_eff = self.q_by_category.get(category, self.q_eff)  # api.py reads the category from the prompt text
        return req

    def submit(self, req: Request) -> None:
        if self.max_queued is not None and len(self.waiting) >= self.max_queued:
            raise QueueFull(f"The request queue is full ({self.max_queued} requests).")
        self.waiting.append(req)
        self.wake.set()

    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def accept_length(self) -> float:
        """The /metrics gauge sglang:spec_accept_length: the last decode log's interval figure."""
        return self.gauge_accept

    def rank_accept_length(self, rank: int) -> float | None:
        """internal_states[rank].avg_spec_accept_length: the lifetime average folded at the decode
        logs since the last flush; None (key absent) before the first fold, as SGLang's
        (srt/managers/scheduler_components/internal_state.py, _average_accept_length)."""
        verify = self.spec_total_verify[rank]
        return self.spec_total_tokens[rank] / verify if verify else None

    def flush(self) -> None:
        for rank in range(self.ranks):
            self.spec_tokens[rank] = self.spec_verify[rank] = 0
            self.spec_total_tokens[rank] = self.spec_total_verify[rank] = 0

    def _admit(self) -> list[Request]:
        batch, tokens = [], 0
        while self.waiting and len(self.running) + len(batch) < self.max_running:
            req = self.waiting[0]
            if req.aborted:
                self.waiting.popleft()
                continue
            need = req.input_len + req.max_new
            if self.kv_used + need > self.kv_capacity and (self.running or batch):
                break  # wait for memory; a lone request is admitted and retracted later in SGLang
            if batch and tokens + req.input_len > self.chunk:
                break
            self.waiting.popleft()
            req.kv_reserved = min(need, self.kv_capacity)
            self.kv_used += req.kv_reserved
            tokens += req.input_len
            batch.append(req)
        return batch

    # -- the loop ----------------------------------------------------------------------
    async def _sleep_until(self, target: float) -> float:
        now = time.monotonic()
        if target > now:
            await asyncio.sleep(target - now)
            self.behind_s = max(0.0, time.monotonic() - target)  # woke late: the next steps catch it up
            return target
        if now - target > MAX_LAG_S:
            self.lag_resyncs += 1
            self.schedule_lost_s += now - target
            self.behind_s = 0.0
            return now
        self.behind_s = now - target
        return target

    async def run(self) -> None:
        next_t = time.monotonic()
        while True:
            if not self.waiting and not self.running:
                # Idle: whatever the schedule was still behind by is never caught up (the next
                # request starts the schedule afresh), so its last tokens came that late: lost, and
                # the loop's own work since (emitting them) with it, so that the wall clock is
                # scheduled + idle + lost + behind to the microsecond. At C=1 that is every
                # request's end; on a machine that keeps up, well under a millisecond.
                now = time.monotonic()
                self.schedule_lost_s += max(0.0, now - next_t)
                self.behind_s = 0.0
                self.wake.clear()
                self.idle_since = now
                await self.wake.wait()
                now = time.monotonic()
                self.idle_s += now - self.idle_since
                self.idle_since = None
                next_t = max(next_t, now)
                continue
            self.running = [r for r in self.running if not r.aborted or self._release(r)]
            batch = self._admit()
            if batch:
                n_tokens = sum(r.input_len for r in batch)
                cost = self.costs.prefill(n_tokens) * self.scale
                if self.telemetry:
                    self.telemetry.step(next_t, next_t + cost, n_tokens)
                next_t = await self._sleep_until(next_t + cost)
                self.scheduled_s += cost
                self.metrics.prompt_tokens += n_tokens
                LOG.debug(
                    "Prefill batch, #new-seq: %d, #new-token: %d, #running-req: %d, #queue-req: %d",
                    len(batch),
                    n_tokens,
                    len(self.running),
                    len(self.waiting),
                    extra=TP0,
                )
                for req in batch:
                    if not req.aborted:
                        self.running.append(req)
                        self._emit(req, 1)
                continue
            if not self.running:
                continue
            size = len(self.running)
            if self.adaptive:
                steps = self.adaptive.choose(size)
            else:
                steps = model.step_choice(self.costs, self.spec, size)
            cost = model.step_cost(self.costs, self.spec, size, steps)
            if self.telemetry:
                self.telemetry.step(next_t, next_t + cost * self.scale, model.step_tokens(self.spec, size, steps))
            next_t = await self._sleep_until(next_t + cost * self.scale)
            self.scheduled_s += cost * self.scale
            self.decode_steps += 1
            self.decode_batch_sum += size
            accepted = attempted = 0
            for req in list(self.running):
                if req.aborted:
                    continue
                if steps:
                    gained = model.draw_accept(self.rng, req.q_eff, steps)
                    req.verify_ct += 1
                    req.spec_accepted += gained
                    # Req.update_spec_correct_drafts_histogram (srt/managers/schedule_batch.py)
                    hist = req.spec_hist
                    if len(hist) < gained:
                        hist.extend([0] * (gained - len(hist)))
                    hist[gained - 1] += 1
                    self.spec_tokens[req.rank] += gained
                    self.spec_verify[req.rank] += 1
                    accepted += gained - 1
                    attempted += min(gained, steps)
                else:
                    gained = 1
                self._emit(req, gained)
            if self.adaptive and steps:
                self.adaptive.observe(accepted, attempted)
            if self.decode_steps % self.log_interval == 0:
                self._log_decode(size, steps)

    def _emit(self, req: Request, count: int) -> None:
        count = min(count, req.stop_at - len(req.generated))
        tokens = req.tokens
        new_ids = [tokens.randrange(len(VOCAB)) for _dummy in range(count)]
        if req.diverge_at is not None:  # --emulator-output-mismatch: from diverge_at on, other tokens
            first = len(req.generated)
            new_ids = [(t + 1) % len(VOCAB) if first + i >= req.diverge_at else t for i, t in enumerate(new_ids)]
        now = time.monotonic()
        req.generated.extend(new_ids)
        self.interval_tokens += count
        self.emitted_tokens += count
        if req.first_token_at is None:
            req.first_token_at = now
            self.metrics.ttft.observe(now - req.created)
        elif count:
            self.metrics.itl.observe((now - req.last_emit) / count, count)
        req.last_emit = now
        done = len(req.generated) >= req.stop_at
        if done:
            req.finish_reason = "length" if len(req.generated) >= req.max_new else "stop"
            req.finished_at = now
            self.metrics.e2e.observe(now - req.created)
            # sglang:generation_tokens_total and spec_verify_calls_total grow only when a request
            # finishes (srt/observability/metrics_collector.py, observe_one_finished_request,
            # called under `if state.finished` in srt/managers/tokenizer_manager.py).
            self.metrics.generation_tokens += len(req.generated)
            self.metrics.spec_verify_calls += req.verify_ct
            self.running.remove(req)
            self._release(req)
        try:
            req.sink.on_tokens(req, new_ids)
            if done:
                req.sink.on_finish(req)
        except (ConnectionError, RuntimeError):
            req.aborted = True

    def _release(self, req: Request) -> bool:
        self.kv_used -= req.kv_reserved
        req.kv_reserved = 0
        return False

    def _log_decode(self, size: int, steps: int) -> None:
        now = time.monotonic()
        elapsed = max(1e-9, now - self.interval_start)
        self.last_gen_throughput = self.interval_tokens / elapsed / (1 if self.scale == 0 else 1)
        self.interval_tokens = 0
        self.interval_start = now
        tokens, verify = sum(self.spec_tokens), sum(self.spec_verify)
        if verify:
            self.gauge_accept = tokens / verify
            self.gauge_accept_rate = (tokens - verify) / (verify * self.spec.num_steps) if self.spec.num_steps else 0.0
        spec = f"accept len: {self.gauge_accept:.2f}, " if self.spec else ""
        for rank in range(self.ranks):
            self.spec_total_tokens[rank] += self.spec_tokens[rank]
            self.spec_total_verify[rank] += self.spec_verify[rank]
            self.spec_tokens[rank] = self.spec_verify[rank] = 0
        LOG.info(
            "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, %scuda graph: %s, "
            "gen throughput (token/s): %.2f, #queue-req: %d,",
            size,
            self.kv_used,
            self.kv_used / self.kv_capacity,
            spec,
            size <= self.graph_bs,
            self.last_gen_throughput,
            len(self.waiting),
            extra=TP0,
        )

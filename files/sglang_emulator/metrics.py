"""Prometheus text for /metrics, with SGLang's metric names (``sglang:`` prefix)."""

from __future__ import annotations

import bisect

# Emulator only (no real engine serves it): the wall-clock seconds the scheduler loop ran so far
# behind its modelled schedule that it gave them up (engine.MAX_LAG_S), or was still behind when its
# batch emptied. Near 0 on a machine that kept up; a client reads its rise over a window as the
# share of the window the node was not emulated.
LOST_NAME = "specbench_emulator:schedule_lost_seconds_total"

LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    60.0,
    120.0,
    300.0,
)


class Histogram:
    def __init__(self, buckets=LATENCY_BUCKETS):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += times
        self.total += value * times
        self.count += times

    def render(self, name: str, labels: str) -> list[str]:
        lines, cumulative = [], 0
        for bound, n in zip(self.buckets, self.counts, strict=False):
            cumulative += n
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum{{{labels}}} {self.total}")
        lines.append(f"{name}_count{{{labels}}} {self.count}")
        return lines


class Metrics:
    def __init__(self):
        self.prompt_tokens = 0
        self.generation_tokens = 0  # of finished requests only (see engine._emit)
        self.spec_verify_calls = 0  # likewise
        self.requests = 0
        self.ttft = Histogram()
        self.itl = Histogram()
        self.e2e = Histogram()

    def render(self, engine, model_name: str) -> str:
        labels = f'model_name="{model_name}"'
        gauges = {
            "num_running_reqs": ("The number of running requests.", len(engine.running)),
            "num_queue_reqs": ("The number of requests in the waiting queue.", len(engine.waiting)),
            "gen_throughput": ("The generation throughput (token/s).", engine.last_gen_throughput),
            "token_usage": ("The token usage.", engine.kv_used / engine.kv_capacity),
            "spec_accept_length": ("The average acceptance length of speculative decoding.", engine.accept_length()),
            "spec_accept_rate": ("The average acceptance rate of speculative decoding.", engine.gauge_accept_rate),
        }
        counters = {
            "prompt_tokens_total": ("Number of prefill tokens processed.", self.prompt_tokens),
            "num_requests_total": ("Number of requests processed.", self.requests),
            "spec_verify_calls_total": ("Number of speculative verify calls.", self.spec_verify_calls),
        }
        out = []
        for name, (help_text, value) in gauges.items():
            out += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} gauge", f"sglang:{name}{{{labels}}} {value}"]
        for name, (help_text, value) in counters.items():
            out += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} counter", f"sglang:{name}{{{labels}}} {value}"]
        # Labelled by is_streaming as well (srt/observability/metrics_collector.py); the emulator
        # keeps one total, under the streaming label its clients use.
        out += ["# HELP sglang:generation_tokens_total Number of generation tokens processed.",
                "# TYPE sglang:generation_tokens_total counter",
                f'sglang:generation_tokens_total{{{labels},is_streaming="true"}} {self.generation_tokens}']
        for name, hist, help_text in (
            ("time_to_first_token_seconds", self.ttft, "Histogram of time to first token in seconds."),
            ("inter_token_latency_seconds", self.itl, "Histogram of inter-token latency in seconds."),
            ("e2e_request_latency_seconds", self.e2e, "Histogram of End-to-end request latency in seconds"),
        ):
            out += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} histogram"]
            out += hist.render(f"sglang:{name}", labels)
        out += [f"# HELP {LOST_NAME} Seconds of the modelled schedule the emulator gave up (emulator only).",
                f"# TYPE {LOST_NAME} counter", f"{LOST_NAME}{{{labels}}} {engine.schedule_lost_s}"]
        return "\n".join(out) + "\n"

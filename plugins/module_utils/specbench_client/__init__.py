# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""specbench client core: a closed-loop concurrency sweep against an SGLang (or any
OpenAI-compatible) server, measured next to the server.

Standard library only, and nothing from Ansible: the collection's module bench_sweep and its
action plugin import this package; the role bench_scripts ships it to the node as one file,
``bin/specbench_client.pyz`` (a zipapp of this folder, built by ``node.scripts.zipapp_bytes``
on the controller when it ships), and it runs by hand::

    python3 specbench_client.pyz --base-url http://127.0.0.1:30000 --concurrency 1,2,5,10 \\
        --api chat --input-len 256 --output-len 256 --warmup-s 20 --window-s 60 --output out.json

How a level is measured
-----------------------
* C streams, each a keep-alive HTTP/1.1 connection that sends its next request the moment
  the previous one ends (closed loop). Stream starts are spread evenly over the first half
  of the warmup, and each stream's first request stops after a random share of the output
  length: streams then run at phases spread evenly over a request, so they never move in
  lockstep and freed slots do not refill in bursts.
* Warmup: at least ``warmup_s``, and until every stream has finished one request (all
  worker processes agree on the moment), so the window opens in steady state at every
  level, whether a request lasts 50 ms at C=1 or 90 s at C=250.
* Fixed lengths: ``ignore_eos``, temperature 0, ``max_tokens`` = output length; prompts are
  synthesized from a seed (one word per token on the emulator) or read from a JSONL file.
* Steady state: throughput = output tokens that *arrived* inside the measurement window
  (after the warmup) / window length. No ramp-up, no ramp-down tail. A 95 % confidence
  interval comes from the repeats (two or more) or from batch means over the window.
* Whole run, the way SGLang's bench_serving computes it: output tokens of every completed
  request / (last completion - first send), ramp and tail included; for comparison.
* Latency (requests sent inside the window, completed): TTFT, ITL (a chunk carrying k
  tokens has its gap split over k, as SGLang does), TPOT ((E2E - TTFT) / (tokens - 1)),
  E2E, per-stream decode tok/s; each mean, p50, p90, p99 (linear interpolation, numpy's).
* Tokens per chunk: native /generate from ``meta_info.completion_tokens`` (exact); chat and
  completions from the usage in every chunk (``stream_options.continuous_usage_stats``, which
  SGLang and vLLM honour), else the words of each delta scaled so a request's total equals the
  server's ``usage.completion_tokens``; ``token_count_source`` says which.
* Accept length (``accept_length_source`` says which): sum(completion_tokens) /
  sum(spec_verify_ct) over the requests finished in the window, per request from /generate or,
  on SGLang's chat and completions APIs, from ``sglext.spec_tokens_details`` (asked for with
  ``return_spec_tokens_details``), else the engine's
  counters over the window (/metrics), else ``/server_info`` over every DP rank after a
  ``/flush_cache`` before the level. Server-side running and queued requests, and the server's
  own generated-token counter over the window, from ``/metrics`` when it exists (a client
  figure far from the server's draws a warning; SGLang counts a request when it finishes, so
  its counter is held against the requests finished between two readings).
* The client measures itself: CPU use per worker process, and how long after their arrival
  (the kernel's stamp) it read the data; above 85 % of a core, or reads 10 ms behind on
  average, the level carries a warning that the client, not the server, may be the limit.

The event loop is one epoll loop per worker process over non-blocking sockets, 256 KiB
reads into one preallocated buffer (no small-read-buffer throttling). Each read is stamped
with the kernel's receive time (SO_TIMESTAMPNS, moved onto the monotonic clock), so a busy
or descheduled client does not stamp late; elsewhere ``time.monotonic()`` at the read.
Several worker processes (``--workers``) share the system's monotonic clock, so their
stamps and windows line up.

Layout (each file one concern)
------------------------------
* settings.py: every setting, its default and its check; cli.py: the command line.
* worker.py (request side, epoll loop, tally) and http1.py (HTTP/1.1 framing, chunked
  coding, server-sent events): the transport.
* apis/: one module per API (chat, completions, native /generate); engines/: one module per
  server engine (accept length, cache flush, metric names); adding one is one new file.
* server.py: probe, cache flush, accept length, the /metrics poller.
* level.py: one level (worker processes, repeats); summary.py and stats.py: its figures.
* sweep.py: the one loop over the levels, progress lines, redaction, results files.
* modecheck.py: the mode a run is filed under held against what the server runs.
* output_match.py: the fixed greedy prompts sent before the sweep, their output token ids kept.
"""
from __future__ import annotations

from .apis import APIS
from .cli import build_parser, main
from .http1 import BODY, CONNECTING, HEAD, IDLE, SENDING, Stream
from .level import ensure_fd_limit, resolve_workers, run_level, run_once
from .modecheck import check as check_mode_against_server
from .modecheck import describe_running
from .output_match import collect_outputs
from .request import Req, RequestFactory, synth_prompt
from .server import MetricsPoller, flush_cache, http_call, parse_metrics, probe_server, server_accept_length
from .settings import (
    DEFAULT_LEVELS,
    DEFAULTS,
    MAX_CONCURRENCY,
    ServerError,
    SettingsError,
    __version__,
    describe_plan,
    load_prompts,
    normalize_settings,
    parse_base_url,
    parse_levels,
    public_settings,
)
from .stats import mean_ci95, percentile, summary, t975
from .summary import describe_failures, summarize
from .sweep import category_settings, format_level_line, redact, sweep, sweep_outcome, unmeasured_level, write_json_atomic
from .worker import Worker, snap

__all__ = [
    "APIS", "BODY", "CONNECTING", "DEFAULTS", "DEFAULT_LEVELS", "HEAD", "IDLE", "MAX_CONCURRENCY", "SENDING",
    "MetricsPoller", "Req", "RequestFactory", "ServerError", "SettingsError", "Stream", "Worker", "__version__",
    "build_parser", "category_settings", "check_mode_against_server", "collect_outputs", "describe_running", "describe_failures",
    "describe_plan", "ensure_fd_limit", "flush_cache",
    "format_level_line",
    "http_call", "load_prompts", "main", "mean_ci95", "normalize_settings", "parse_base_url", "parse_levels",
    "parse_metrics", "percentile", "probe_server", "public_settings", "redact", "resolve_workers", "run_level",
    "run_once", "server_accept_length", "snap", "summarize", "summary", "sweep", "sweep_outcome", "synth_prompt",
    "t975", "unmeasured_level", "write_json_atomic",
]

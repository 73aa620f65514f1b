#!/usr/bin/python
# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Module bench_sweep: measure concurrency levels on the node, next to the server."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_sweep
short_description: Measure an LLM server's steady-state throughput and latency at concurrency levels
description:
  - Runs a closed-loop benchmark against an SGLang (or any OpenAI-compatible) server on the managed
    node, next to the server, and returns one result per concurrency level.
  - C streams per level, each sending its next request the moment the previous one ends; fixed input
    and output lengths (C(ignore_eos), temperature 0); prompts synthesized from a seed or given.
  - The measurement window opens after O(warmup_s) and once every stream has finished a request, so
    it is in steady state at every level. Throughput is the output tokens that arrived inside the
    window divided by its length; a 95% confidence interval comes from repeats or batch means. The
    whole-run figure the way SGLang's bench_serving computes it is returned too.
  - Per level also TTFT, ITL, TPOT and E2E (mean, p50, p90, p99), per-stream decode tok/s, request/s,
    failures by kind, the accept length of speculative decoding, the server's running and queued
    requests from /metrics, and the client's own CPU use with a warning when the client is the limit.
  - The client core is the package C(plugins/module_utils/specbench_client/), standard library only;
    the role bench_scripts ships it to the node as one file that runs by hand there as
    C(python3 specbench_client.pyz --help).
  - Used through the action plugin of the same name, which runs the levels one by one from the
    controller, prints a progress line per level and writes each level to the results file at once.
    Called directly (for example with C(ansible -m)), the module measures every level in one call.
version_added: "0.1.0"
author:
  - specbench developers (!UNKNOWN)
extends_documentation_fragment:
  - specbench.core.attributes
options:
  base_url:
    description:
      - The server's root, C(http://HOST:PORT). A trailing C(/v1) is dropped. Only plain http.
    type: str
    required: true
  api:
    description:
      - C(chat) is OpenAI chat completions, C(completions) OpenAI completions, C(native) SGLang's C(/generate).
    type: str
    choices: [chat, completions, native]
    default: chat
  model:
    description:
      - Model name sent with OpenAI requests. Empty takes the first of C(GET /v1/models); a name the
        server does not list is an error.
    type: str
    default: ""
  api_key:
    description:
      - Sent as C(Authorization Bearer). Never logged and never returned.
    type: str
    default: ""
  concurrency:
    description:
      - Concurrency levels, measured in this order. Positive whole numbers, each once.
    type: list
    elements: raw
    default: [1, 2, 5, 10, 30, 70, 100, 250]
  input_len:
    description:
      - Prompt length in tokens (synthesized prompts have one word per token).
    type: int
    default: 256
  output_len:
    description:
      - Output tokens per request (C(max_tokens) with C(ignore_eos)); at least 1.
    type: int
    default: 256
  warmup_s:
    description:
      - Least warmup before each level's window, in seconds; the window also waits until every
        stream has finished one request.
    type: float
    default: 30
  window_s:
    description:
      - Length of the measurement window, in seconds (window mode).
    type: float
    default: 60
  target_rel_ci:
    description:
      - Adaptive window when above 0 - each level measures until its 95% interval's half-width is at most
        this fraction of its figure (e.g. C(0.03)) and it has lasted O(window_min_requests) mean request
        durations, or until O(window_max_s); it may stop before O(window_s) (the window planned). The level
        records C(window) (C(planned_s), C(used_s), C(target_reached)). 0 is a fixed window of O(window_s).
      - Needs the level in one worker process; with several (above 256 streams by default) the window stays fixed.
    type: float
    default: 0
  window_max_s:
    description:
      - The longest an adaptive window may last, in seconds; 0 is four times O(window_s).
    type: float
    default: 0
  window_min_requests:
    description:
      - The mean request durations an adaptive window lasts at least.
    type: int
    default: 5
  requests:
    description:
      - Request-count mode when above 0 - this many requests per level after the warmup; the
        steady window then ends when the first stream runs out of requests.
    type: int
    default: 0
  repeats:
    description:
      - Runs per level. Two or more give the interval from the repeats' spread.
    type: int
    default: 1
  batches:
    description:
      - Batch means per window for the interval when there is one repeat.
    type: int
    default: 10
  seed:
    description:
      - Seed of the synthesized prompts and of the first requests' random lengths.
    type: int
    default: 42
  prompts:
    description:
      - Prompts used instead of synthesized ones, in the seed's order (the action plugin reads them
        from a ShareGPT JSON, OpenAI chat JSONL or plain JSONL file on the controller, or the
        built-in set); strings, or records with C(messages), C(category) and C(output_len).
    type: list
    elements: raw
  prompts_format:
    description:
      - The prompts file's format; C(auto) tells it from the file's first entry.
    type: str
    choices: [auto, sharegpt, chat, prompt]
    default: auto
  lengths:
    description:
      - C(fixed) asks output_len tokens of every request (ignore_eos); C(data) each prompt's own
        length (its C(output_len), else its reference reply's words x 4/3), capped at output_len,
        still with ignore_eos so every mode generates the same lengths.
    type: str
    choices: [fixed, data]
    default: fixed
  categories:
    description:
      - C(mixed) sends every category's prompts in each level (per-category figures from the
        engine's per-request speculation figures); C(separate) runs each level once per category
        with only its prompts (each level names its C(category); a crossover per category).
    type: str
    choices: [mixed, separate]
    default: mixed
  request_timeout_s:
    description:
      - Per-request timeout in seconds; a stalled stream fails with kind C(timeout).
    type: float
    default: 600
  workers:
    description:
      - Client processes; 0 takes one per 256 streams (at most one per CPU).
    type: int
    default: 0
  drain:
    description:
      - Let requests in flight at the window's end finish (needed for the whole-run figure).
    type: bool
    default: true
  stop_on_error:
    description:
      - Stop after a level that has an error (some or all requests failed).
    type: bool
    default: true
  saturated_retries:
    description:
      - How often to measure a level again when the machine running the client (or the emulator)
        did not keep up with it (the level's C(saturated) reasons); the earlier attempts are kept
        in C(remeasured_after). A level still saturated after them stays named so and out of
        every verdict.
    type: int
    default: 1
  flush_cache:
    description:
      - POST C(/flush_cache) before each level of a speculative server, so the server's accept
        length covers that level only.
    type: bool
    default: true
  metrics_interval_s:
    description:
      - Seconds between reads of C(/metrics) for running and queued requests.
    type: float
    default: 1
  telemetry_interval_s:
    description:
      - Seconds between samples of the server's GPUs (power, energy counter, clocks, utilisation, memory,
        temperature, throttle reasons) during each window, read through NVML (nvidia-ml-py) on the node or
        from the emulator's GPUs; each level's C(gpu_telemetry) and C(energy_j_per_output_token) come from
        them. Only the server's GPUs are read (those NVML lists the process on the server's port or its children
        on, else its CUDA_VISIBLE_DEVICES, else its tp_size); each window's C(gpus_read) says which and how. 0
        samples nothing.
    type: float
    default: 0.25
  probe:
    description:
      - Only read what the server says about itself (models, version, launch command, speculative
        algorithm, metrics); measure nothing.
    type: bool
    default: false
  output_match:
    description:
      - Only read the server (as O(probe)) and send this many fixed prompts one at a time (temperature 0,
        O(output_match_tokens) output tokens, C(ignore_eos), not streamed), returning their output token ids (or
        text where the API gives none) as RV(output_match); measure nothing. 0 (the default) sends none. The
        action plugin asks for them with its probe, before the sweep (its C(output_match_prompts)), and files them
        in the results file, for the comparison's output match.
    type: int
    default: 0
  output_match_tokens:
    description: Output tokens per output-match prompt.
    type: int
    default: 32
  progress_path:
    description:
      - Where on the node each client worker rewrites, once a second, its requests done and failed and the
        tokens read so far (C(<progress_path>.w<index>), one JSON line each), for the action plugin's live
        progress lines while a level runs; removed when the module ends. Empty writes none.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: Sends no request; returns what it would run.
  diff_mode:
    support: none
  facts:
    support: none
notes:
  - The node needs Python 3.8 or later and nothing else.
  - Traffic goes to O(base_url) only.
seealso:
  - name: SGLang bench_serving
    description: The metric definitions this module matches.
    link: https://github.com/sgl-project/sglang/blob/main/python/sglang/bench_serving.py
"""

EXAMPLES = r"""
- name: Sweep | Measure three levels against the local server
  specbench.core.bench_sweep:
    base_url: http://127.0.0.1:30000
    concurrency: [1, 10, 70]
    warmup_s: 10
    window_s: 30

- name: Sweep | Read what the server says about itself
  specbench.core.bench_sweep:
    base_url: http://127.0.0.1:30000
    api_key: "{{ bench_api_key }}"
    probe: true
  register: server
"""

RETURN = r"""
output_match:
  description:
    - With O(output_match), the outputs - C(prompts), C(concurrency) (1), C(temperature) (0), C(max_tokens),
      C(ignore_eos), C(api), C(source) (C(token_ids) or C(text)), C(prompt_sha256) and C(outputs), one
      C({index, token_ids, text, error}) per prompt.
  returned: when output_match is above 0
  type: dict
server:
  description: What the server says about itself (API keys removed).
  returned: success
  type: dict
  contains:
    model:
      description: The model name used.
      type: str
    models:
      description: Models listed by C(/v1/models).
      type: list
    version:
      description: Server version from C(/server_info), when it tells.
      type: str
    launch_command:
      description: The server's launch command, when it tells (API key redacted).
      type: str
    speculative_algorithm:
      description: Speculative algorithm in use, or null.
      type: str
    speculation:
      description:
        - What the server runs, read for the mode check of an external server - C(algorithm) (null for plain
          decoding, C(unknown) when the server does not say), on SGLang C(adaptive), C(num_steps), C(eagle_topk)
          and C(num_draft_tokens) from the resolved C(/server_info), on vLLM C(num_draft_tokens), and C(source).
      type: dict
    metrics_available:
      description: Whether C(/metrics) answers with SGLang or vLLM metrics.
      type: bool
    server_info:
      description: The whole C(/server_info) (or C(/get_server_info)) answer, API keys redacted.
      type: dict
levels:
  description: One result per level measured, in order.
  returned: unless probe or check mode
  type: list
  elements: dict
  contains:
    concurrency:
      description: Concurrent streams.
      type: int
    output_tok_per_s:
      description: Steady-state output tokens per second (tokens that arrived in the window / window).
      type: float
    output_tok_per_s_ci95:
      description: 95% confidence interval of output_tok_per_s, [low, high].
      type: list
    output_tok_per_s_whole_run:
      description: Output tokens of completed requests / (last completion - first send), as bench_serving.
      type: float
    request_per_s:
      description: Requests completed inside the window per second.
      type: float
    requests_ok:
      description: Requests that completed.
      type: int
    requests_failed:
      description: Requests that failed.
      type: int
    failures_by_kind:
      description: Failed requests per kind (connect_refused, disconnected, timeout, http_401, malformed, ...).
      type: dict
    ttft_ms:
      description: Time to first token, mean/p50/p90/p99 in milliseconds.
      type: dict
    itl_ms:
      description: Inter-token latency (a chunk of k tokens splits its gap over k), mean/p50/p90/p99 ms.
      type: dict
    tpot_ms:
      description: Time per output token after the first, mean/p50/p90/p99 ms.
      type: dict
    e2e_ms:
      description: End-to-end request latency, mean/p50/p90/p99 ms.
      type: dict
    decode_tok_per_s_per_stream:
      description: Per-stream decode rate after the first token, mean/p50/p90/p99.
      type: dict
    accept_length:
      description: >-
        Mean accept length of speculative decoding over the window, null when not speculative or when the server's
        counters counted no speculative step over the window (then C(accept_length_note) says so: the server's
        lifetime figure describes other batch sizes and is not given).
      type: float
    accept_length_note:
      description: Why a speculative level has no accept length although its counters were read; absent otherwise.
      type: str
    server_running:
      description: Running requests from /metrics during the window (mean, max), or null.
      type: dict
    server_queued:
      description: Queued requests from /metrics during the window (mean, max), or null.
      type: dict
    server_output_tok_per_s:
      description: The server's own generated tokens per second over the window (from /metrics), or null.
      type: float
    client:
      description: The client's own CPU use per worker process and whether it was the bottleneck.
      type: dict
    window:
      description:
        - The window - C(planned_s) (window_s), C(used_s), C(adaptive); for an adaptive one C(target_rel_ci),
          C(reached_rel_ci), C(max_s), C(min_request_durations), C(request_durations) and C(target_reached)
          (false - it stopped at its maximum without the target - is a confounder).
      type: dict
    saturated:
      description:
        - "Why the machine did not keep up at this level, one string each (C(client: ...), C(engine: delivered 55% of
          its own model's rate), C(engine: held 20.0 of the 32 requests ...), C(engine: the emulator gave up ...));
          empty when it did. A saturated level is not evidence about the node. Empty for a level whose server went
          down during it (any C(connect_refused) or C(disconnected) failure): that level failed."
      type: list
      elements: str
    emulator_model:
      description:
        - On the emulator only (absent on real engines), its own analytic rate at this level from
          C(GET /emulator/analytic), wall-clock, with its C(source).
      type: dict
    emulator_schedule_lost:
      description:
        - On the emulator only (absent on real engines), the wall-clock seconds of its modelled schedule
          its scheduler gave up in the level's windows, C(bounds_s) [low, high] from its counter
          C(specbench_emulator:schedule_lost_seconds_total) read at each window's edges, C(window_s) and
          C(source). Near 0 on a machine that kept up; above 5% of the window the level is C(saturated).
          C(bounds_s) is null, with C(unbracketed), where the emulator serves the counter but no reads
          bracketed a window, and the level is then C(saturated) too (whether it kept up is unknown).
      type: dict
    figures:
      description:
        - Which speed the figures are at. On the emulator at a known time scale C(node speed ...), the rates
          multiplied and the latencies divided by the time scale, the measured ones kept as C(wall_clock_<name>);
          C(measured) on a real engine.
      type: str
    warnings:
      description: Conditions that make the figures suspect (client bottleneck, short outputs...).
      type: list
    error:
      description: Why the level failed, naming the cause; null when it did not.
      type: str
settings:
  description: The settings used (no API key, no prompt texts).
  returned: always
  type: dict
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.specbench.core.plugins.module_utils.launch.process import server_gpu_hints
from ansible_collections.specbench.core.plugins.module_utils.specbench_client import (
    DEFAULTS,
    ServerError,
    SettingsError,
    collect_outputs,
    describe_plan,
    normalize_settings,
    probe_server,
    public_settings,
    redact,
    sweep,
)
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.settings import parse_base_url
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.telemetry import is_local

ARGUMENT_SPEC = {
    "base_url": {"type": "str", "required": True},
    "api": {"type": "str", "choices": ["chat", "completions", "native"], "default": "chat"},
    "model": {"type": "str", "default": ""},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "concurrency": {"type": "list", "elements": "raw", "default": list(DEFAULTS["concurrency"])},
    "input_len": {"type": "int", "default": DEFAULTS["input_len"]},
    "output_len": {"type": "int", "default": DEFAULTS["output_len"]},
    "warmup_s": {"type": "float", "default": DEFAULTS["warmup_s"]},
    "window_s": {"type": "float", "default": DEFAULTS["window_s"]},
    "target_rel_ci": {"type": "float", "default": DEFAULTS["target_rel_ci"]},
    "window_max_s": {"type": "float", "default": DEFAULTS["window_max_s"]},
    "window_min_requests": {"type": "int", "default": DEFAULTS["window_min_requests"]},
    "requests": {"type": "int", "default": DEFAULTS["requests"]},
    "repeats": {"type": "int", "default": DEFAULTS["repeats"]},
    "batches": {"type": "int", "default": DEFAULTS["batches"]},
    "seed": {"type": "int", "default": DEFAULTS["seed"]},
    "prompts": {"type": "list", "elements": "raw"},
    "prompts_format": {"type": "str", "choices": ["auto", "sharegpt", "chat", "prompt"],
                       "default": DEFAULTS["prompts_format"]},
    "lengths": {"type": "str", "choices": ["fixed", "data"], "default": DEFAULTS["lengths"]},
    "categories": {"type": "str", "choices": ["mixed", "separate"], "default": DEFAULTS["categories"]},
    "request_timeout_s": {"type": "float", "default": DEFAULTS["request_timeout_s"]},
    "workers": {"type": "int", "default": DEFAULTS["workers"]},
    "drain": {"type": "bool", "default": DEFAULTS["drain"]},
    "stop_on_error": {"type": "bool", "default": DEFAULTS["stop_on_error"]},
    "saturated_retries": {"type": "int", "default": DEFAULTS["saturated_retries"]},
    "flush_cache": {"type": "bool", "default": DEFAULTS["flush_cache"]},
    "metrics_interval_s": {"type": "float", "default": DEFAULTS["metrics_interval_s"]},
    "telemetry_interval_s": {"type": "float", "default": DEFAULTS["telemetry_interval_s"]},
    "probe": {"type": "bool", "default": False},
    "output_match": {"type": "int", "default": 0},
    "output_match_tokens": {"type": "int", "default": 32, "no_log": False},
    "progress_path": {"type": "str", "default": ""},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = dict(module.params)
    probe_only = params.pop("probe")
    match_count = params.pop("output_match")
    match_tokens = params.pop("output_match_tokens")
    progress_path = params.pop("progress_path")
    if match_count < 0 or match_tokens < 1:
        module.fail_json(msg=f"output_match must be 0 or more prompts and output_match_tokens 1 or more tokens "
                             f"(got {match_count} and {match_tokens})")
    try:
        settings = normalize_settings(params)
    except SettingsError as exc:
        module.fail_json(msg=str(exc))
    secrets = [settings["api_key"]]
    public = public_settings(settings)
    if module.check_mode:
        module.exit_json(changed=False, msg=describe_plan(settings), levels=[], settings=public)
    try:
        server = probe_server(settings)
    except ServerError as exc:
        module.fail_json(msg=redact(str(exc), secrets), settings=public, levels=[], server_error=True)
    if match_count:
        outputs = collect_outputs(settings, server.get("model") or settings["model"], match_count, match_tokens)
        module.exit_json(changed=False, server=redact(server, secrets), output_match=redact(outputs, secrets),
                         settings=public)
    if probe_only:
        module.exit_json(changed=False, server=redact(server, secrets), settings=public)
    if progress_path:
        settings["_progress_path"] = progress_path
    host, port = parse_base_url(settings["base_url"])[:2]
    if settings["telemetry_interval_s"] > 0 and is_local(host):
        # the server's process tree and CUDA_VISIBLE_DEVICES: telemetry then reads only its GPUs (pick_gpus)
        server["gpu_hints"] = server_gpu_hints(port)
    try:
        levels = [redact(level, secrets) for level in sweep(settings, server)]
    finally:
        for path in glob.glob(glob.escape(progress_path) + ".w*") if progress_path else []:
            try:
                os.unlink(path)
            except OSError:
                pass
    module.exit_json(changed=False, server=redact(server, secrets), levels=levels, settings=public)


if __name__ == "__main__":
    main()

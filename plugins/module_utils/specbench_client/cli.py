# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The command line: ``python3 specbench_client.pyz --help`` on the node, by hand."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .apis import APIS
from .server import probe_server
from .settings import DEFAULTS, ServerError, SettingsError, __version__, normalize_settings, public_settings
from .sweep import format_level_line, redact, sweep, write_json_atomic


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specbench_client.pyz",
        description="Closed-loop concurrency sweep against an SGLang or OpenAI-compatible server: steady-state "
                    "output tok/s with a 95%% interval, TTFT/ITL/TPOT/E2E percentiles, accept length, "
                    "server-side queueing and the client's own CPU use. Standard library only.",
        epilog="Example: python3 specbench_client.pyz --base-url http://127.0.0.1:30000 --concurrency 1,2,5,10 "
               "--warmup-s 10 --window-s 30 --output results.json")
    d = DEFAULTS
    p.add_argument("--base-url", default=d["base_url"], help="server root, http://HOST:PORT (default %(default)s)")
    p.add_argument("--api", choices=APIS, default=d["api"], help="chat, completions or native /generate "
                   "(default %(default)s)")
    p.add_argument("--model", default="", help="model name (default: the first of GET /v1/models)")
    p.add_argument("--api-key", default=os.environ.get("SPECBENCH_API_KEY", ""),
                   help="Bearer key (default: $SPECBENCH_API_KEY); never printed or written")
    p.add_argument("--concurrency", default=",".join(map(str, d["concurrency"])),
                   help="levels, comma-separated (default %(default)s)")
    p.add_argument("--input-len", type=int, default=d["input_len"], help="prompt tokens (default %(default)s)")
    p.add_argument("--output-len", type=int, default=d["output_len"], help="output tokens (default %(default)s)")
    p.add_argument("--warmup-s", type=float, default=d["warmup_s"], help="warmup per level, s (default %(default)s)")
    p.add_argument("--window-s", type=float, default=d["window_s"],
                   help="measurement window per level, s (default %(default)s)")
    p.add_argument("--requests", type=int, default=d["requests"],
                   help="request-count mode: requests per level after the warmup (default 0: window mode)")
    p.add_argument("--repeats", type=int, default=d["repeats"], help="runs per level (default %(default)s)")
    p.add_argument("--target-rel-ci", type=float, default=d["target_rel_ci"],
                   help="adaptive window: measure until the 95%% interval's half-width is this fraction of the "
                        "figure, e.g. 0.03 (0: a fixed --window-s)")
    p.add_argument("--window-max-s", type=float, default=d["window_max_s"],
                   help="an adaptive window's longest, in s (0: 4 x --window-s)")
    p.add_argument("--window-min-requests", type=int, default=d["window_min_requests"],
                   help="an adaptive window lasts at least this many mean request durations")
    p.add_argument("--batches", type=int, default=d["batches"],
                   help="batch means for the interval with one repeat (default %(default)s)")
    p.add_argument("--seed", type=int, default=d["seed"], help="prompt seed (default %(default)s)")
    p.add_argument("--prompts-file", default="", help="prompts: ShareGPT JSON, OpenAI chat JSONL (messages), plain "
                   "JSONL (prompt), each entry optionally with a category; or builtin (the set shipped here)")
    p.add_argument("--prompts-format", default=d["prompts_format"], choices=("auto", "sharegpt", "chat", "prompt"),
                   help="the prompts file's format (default %(default)s: told from its first entry)")
    p.add_argument("--lengths", default=d["lengths"], choices=("fixed", "data"),
                   help="output lengths: fixed (--output-len, ignore_eos) or data (each prompt's own, capped at "
                        "--output-len) (default %(default)s)")
    p.add_argument("--categories", default=d["categories"], choices=("mixed", "separate"),
                   help="mixed: every category in each level; separate: each level once per category "
                        "(default %(default)s)")
    p.add_argument("--request-timeout-s", type=float, default=d["request_timeout_s"],
                   help="per-request timeout, s (default %(default)s)")
    p.add_argument("--workers", type=int, default=d["workers"],
                   help="client processes (default 0: one per 256 streams)")
    p.add_argument("--no-drain", dest="drain", action="store_false",
                   help="cut in-flight requests at the window's end (no whole-run figure from them)")
    p.add_argument("--keep-going", dest="stop_on_error", action="store_false",
                   help="go on to the next level after a failed one")
    p.add_argument("--saturated-retries", type=int, default=d["saturated_retries"],
                   help="measure a level again when the machine did not keep up, at most this often "
                        "(default %(default)s)")
    p.add_argument("--no-flush-cache", dest="flush_cache", action="store_false",
                   help="do not POST /flush_cache before each level")
    p.add_argument("--metrics-interval-s", type=float, default=d["metrics_interval_s"],
                   help="seconds between /metrics reads (default %(default)s)")
    p.add_argument("--telemetry-interval-s", type=float, default=d["telemetry_interval_s"],
                   help="seconds between GPU power/energy/clock samples during the window, 0: none "
                        "(default %(default)s)")
    p.add_argument("--probe", action="store_true", help="only print what the server says about itself")
    p.add_argument("--output", default="", help="write the results JSON here (default: stdout)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    raw = {k: v for k, v in vars(args).items() if k not in ("probe", "output")}
    try:
        settings = normalize_settings(raw)
        server = probe_server(settings)
    except (SettingsError, ServerError) as exc:
        sys.stderr.write(f"specbench_client: error: {exc}\n")
        return 2
    secrets = [settings["api_key"]]
    if args.probe:
        sys.stdout.write(json.dumps(redact(server, secrets), indent=2) + "\n")
        return 0
    results = {"client_version": __version__, "settings": public_settings(settings),
               "server": redact(server, secrets), "levels": [], "error": None}

    def on_level(level):
        results["levels"].append(level)
        sys.stderr.write(format_level_line(level) + "\n")
        sys.stderr.flush()
        if args.output:
            write_json_atomic(args.output, redact(results, secrets))

    levels = sweep(settings, server, on_level)
    failed = [lv["error"] for lv in levels if lv["error"]]
    results["error"] = failed[0] if failed else None
    if args.output:
        write_json_atomic(args.output, redact(results, secrets))
    else:
        sys.stdout.write(json.dumps(redact(results, secrets), indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

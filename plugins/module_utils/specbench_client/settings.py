# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Settings: every knob with its default, checked and typed, with errors that name the fix.

The CLI (cli.py), the module bench_sweep and its action plugin all go through
``normalize_settings``; ``label`` names a key the way the caller's user knows it.
"""
from __future__ import annotations

import json
import math
import re
import urllib.parse

from . import prompts as prompt_sets
from .apis import APIS

__version__ = "1.0.0"

DEFAULT_LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
MAX_CONCURRENCY = 20000

# Every setting: default, and what it means (the CLI's --help and the module's docs say the same).
DEFAULTS = {
    "base_url": "http://127.0.0.1:30000",
    "api": "chat",
    "model": "",
    "api_key": "",
    "concurrency": list(DEFAULT_LEVELS),
    "input_len": 256,
    "output_len": 256,
    "warmup_s": 30.0,
    "window_s": 60.0,
    "target_rel_ci": 0.0,
    "window_max_s": 0.0,
    "window_min_requests": 5,
    "requests": 0,
    "repeats": 1,
    "batches": 10,
    "seed": 42,
    "prompts": None,
    "prompts_format": "auto",
    "lengths": "fixed",
    "categories": "mixed",
    "request_timeout_s": 600.0,
    "workers": 0,
    "drain": True,
    "stop_on_error": True,
    "saturated_retries": 1,
    "flush_cache": True,
    "metrics_interval_s": 1.0,
    "telemetry_interval_s": 0.25,
}


class SettingsError(ValueError):
    """A setting is unusable; the message names it and says what to give instead."""


class ServerError(RuntimeError):
    """The server cannot be benchmarked (unreachable, refuses the key, lacks the model...)."""


def _cli_label(key: str) -> str:
    return "--" + key.replace("_", "-")


def _as_int(value, label: str, minimum: int, example: str) -> int:
    if isinstance(value, bool):
        raise SettingsError(f"{label} is {value!r}, not a whole number: give {example}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise SettingsError(f"{label} is {value!r}, not a whole number: give {example}") from None
    if not isinstance(value, int):
        raise SettingsError(f"{label} is {value!r}, not a whole number: give {example}")
    if value < minimum:
        raise SettingsError(f"{label} is {value}, but it must be at least {minimum}: give {example}")
    return value


def _as_float(value, label: str, minimum: float, strict: bool, example: str) -> float:
    if isinstance(value, bool) or value is None or value == "":
        raise SettingsError(f"{label} is {value!r}, not a number of seconds: give {example}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SettingsError(f"{label} is {value!r}, not a number of seconds: give {example}") from None
    if not math.isfinite(number) or number < minimum or (strict and number == minimum):
        bound = "above" if strict else "at least"
        raise SettingsError(f"{label} is {value!r}, but it must be {bound} {minimum:g}: give {example}")
    return number


def _as_bool(value, label: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{label} is {value!r}, not true or false")


def parse_levels(value, label: str = "concurrency") -> list[int]:
    """Concurrency levels from a list or a string ("1,2,5", "1 2 5", "[1, 2, 5]")."""
    example = "a list of positive whole numbers such as [1, 2, 5, 10, 30, 70, 100, 250]"
    if value is None:
        raise SettingsError(f"{label} is not set: give {example}")
    items = value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                items = json.loads(text)
            except ValueError:
                raise SettingsError(f"{label} is {value!r}, which does not parse as a list: give {example}") from None
        else:
            items = [part for part in re.split(r"[\s,]+", text) if part]
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    if not isinstance(items, (list, tuple)):
        raise SettingsError(f"{label} is {value!r}, not a list: give {example}")
    if not items:
        raise SettingsError(f"{label} is empty: give at least one level, {example}")
    levels: list[int] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, str, float)):
            raise SettingsError(f"{label} holds {item!r}, which is not a whole number: give {example}")
        try:
            number = int(item.strip()) if isinstance(item, str) else int(item)
        except ValueError:
            raise SettingsError(f"{label} holds {item!r}, which is not a whole number: give {example}") from None
        if isinstance(item, float) and not item.is_integer():
            raise SettingsError(f"{label} holds {item!r}, which is not a whole number: give {example}")
        if number < 1:
            raise SettingsError(f"{label} holds {number}: every level is a number of concurrent streams and "
                                f"must be at least 1; give {example}")
        if number > MAX_CONCURRENCY:
            raise SettingsError(f"{label} holds {number}, above the client's limit of {MAX_CONCURRENCY} streams")
        if number in levels:
            raise SettingsError(f"{label} holds {number} twice: give each level once (use repeats to measure "
                                "a level several times)")
        levels.append(number)
    return levels


def parse_base_url(url) -> tuple[str, int, str]:
    """(host, port, path prefix) of an http:// base URL; a trailing /v1 is dropped."""
    example = "http://127.0.0.1:30000"
    if not isinstance(url, str) or not url.strip():
        raise SettingsError(f"base_url is not set: give the server's address, e.g. {example}")
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme == "https":
        raise SettingsError(f"base_url {url!r} is https: the client speaks plain http; benchmark next to the "
                            f"server on its own port, e.g. {example}")
    if parts.scheme != "http" or not parts.hostname:
        raise SettingsError(f"base_url {url!r} is not an http://HOST:PORT address: give e.g. {example}")
    try:
        port = parts.port or 80
    except ValueError:
        raise SettingsError(f"base_url {url!r} has an invalid port: give e.g. {example}") from None
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    return parts.hostname, port, prefix


def normalize_settings(raw: dict, label=_cli_label, check_prompts_file: bool = True) -> dict:
    """Checked, typed settings from ``raw`` (defaults filled in). ``label`` names a key in
    messages (``bench_window_s`` in the role, ``--window-s`` by hand)."""
    s = dict(DEFAULTS)
    s.update({k: v for k, v in raw.items() if v is not None and (k in DEFAULTS or k == "prompts_file")})
    out: dict = {}
    host_port = parse_base_url(s["base_url"]) if s.get("base_url") else None
    out["base_url"] = s["base_url"].strip().rstrip("/") if host_port else ""
    api = str(s["api"]).strip().lower()
    if api not in APIS:
        raise SettingsError(f"{label('api')} is {s['api']!r}: give one of {', '.join(APIS)} "
                            "(OpenAI chat completions, OpenAI completions, SGLang's native /generate)")
    out["api"] = api
    out["model"] = "" if s["model"] is None else str(s["model"]).strip()
    out["api_key"] = "" if s["api_key"] is None else str(s["api_key"])
    out["concurrency"] = parse_levels(s["concurrency"], label("concurrency"))
    out["input_len"] = _as_int(s["input_len"], label("input_len"), 1, "the prompt length in tokens, e.g. 256")
    out["output_len"] = _as_int(s["output_len"], label("output_len"), 1,
                                "the output length in tokens, e.g. 256 (0 would measure nothing)")
    out["warmup_s"] = _as_float(s["warmup_s"], label("warmup_s"), 0.0, False, "seconds, e.g. 30 (0: none)")
    out["window_s"] = _as_float(s["window_s"], label("window_s"), 0.0, True, "seconds, e.g. 60")
    out["target_rel_ci"] = _as_float(s["target_rel_ci"], label("target_rel_ci"), 0.0, False,
                                     "the 95 % interval's half-width to reach as a fraction of the figure, e.g. 0.03 "
                                     "(0: a fixed window of window_s)")
    if out["target_rel_ci"] >= 1:
        raise SettingsError(f"{label('target_rel_ci')} is {s['target_rel_ci']!r}, a fraction of the figure: give e.g. "
                            "0.03 for +-3 %, or 0 for a fixed window")
    out["window_max_s"] = _as_float(s["window_max_s"], label("window_max_s"), 0.0, False,
                                    "seconds an adaptive window may last at most, e.g. 180 (0: 4 x window_s)")
    if out["target_rel_ci"] and out["window_max_s"] and out["window_max_s"] < out["window_s"]:
        raise SettingsError(f"{label('window_max_s')} is {out['window_max_s']:g} s, shorter than "
                            f"{label('window_s')} ({out['window_s']:g} s), the window planned: give at least that")
    out["window_min_requests"] = _as_int(s["window_min_requests"], label("window_min_requests"), 1,
                                         "request durations an adaptive window lasts at least, e.g. 5")
    out["requests"] = _as_int(s["requests"], label("requests"), 0,
                              "a number of requests per level, or 0 to measure for window_s")
    out["repeats"] = _as_int(s["repeats"], label("repeats"), 1, "how often to run each level, e.g. 1 or 3")
    out["batches"] = _as_int(s["batches"], label("batches"), 2, "batch means per window, e.g. 10")
    out["seed"] = _as_int(s["seed"], label("seed"), 0, "a whole number, e.g. 42")
    out["request_timeout_s"] = _as_float(s["request_timeout_s"], label("request_timeout_s"), 0.0, True,
                                         "seconds, e.g. 600")
    out["workers"] = _as_int(s["workers"], label("workers"), 0, "worker processes, or 0 for one per 256 streams")
    out["drain"] = _as_bool(s["drain"], label("drain"))
    out["stop_on_error"] = _as_bool(s["stop_on_error"], label("stop_on_error"))
    out["saturated_retries"] = _as_int(s["saturated_retries"], label("saturated_retries"), 0,
                                       "how often to measure a level again that the machine could not keep up "
                                       "with, e.g. 1 (0: never)")
    out["flush_cache"] = _as_bool(s["flush_cache"], label("flush_cache"))
    out["metrics_interval_s"] = _as_float(s["metrics_interval_s"], label("metrics_interval_s"), 0.0, True,
                                          "seconds between /metrics reads, e.g. 1")
    out["telemetry_interval_s"] = _as_float(s["telemetry_interval_s"], label("telemetry_interval_s"), 0.0, False,
                                            "seconds between GPU telemetry samples during the window, e.g. 0.25 "
                                            "(0: no telemetry)")
    path = str(s.get("prompts_file") or "")
    out["prompts_format"] = _choice(s["prompts_format"], label("prompts_format"), prompt_sets.FORMATS,
                                    "auto (told from the file), sharegpt, chat or prompt")
    out["lengths"] = _choice(s["lengths"], label("lengths"), prompt_sets.LENGTHS,
                             "fixed (output_len tokens, ignore_eos) or data (each prompt's own length, capped "
                             "at output_len)")
    out["categories"] = _choice(s["categories"], label("categories"), ("mixed", "separate"),
                                "mixed (every category in each level, figures per category from the engine's per-request "
                                "speculation figures) or separate (each level run once per category)")
    try:
        if s.get("prompts"):
            out["prompts"] = prompt_sets.from_setting(s["prompts"], label("prompts"))
        elif path and check_prompts_file:
            out["prompts"] = load_prompts(path, label("prompts_file"), out["prompts_format"])
        else:
            out["prompts"] = None
    except prompt_sets.PromptsError as exc:
        raise SettingsError(f"{label('prompts_file')}: {exc}") from None
    if out["categories"] == "separate" and not out["prompts"] and not (path and not check_prompts_file):
        raise SettingsError(f"{label('categories')} is separate, but no prompts are given: set "
                            f"{label('prompts_file')} to a file whose entries name a category, or builtin")
    if out["lengths"] == "data" and not out["prompts"] and not (path and not check_prompts_file):
        raise SettingsError(f"{label('lengths')} is data, but no prompts are given: set {label('prompts_file')} "
                            "(a file, or builtin), or lengths fixed")
    out["prompts_file"] = str(path)
    if out["requests"] and out["requests"] < max(out["concurrency"]):
        raise SettingsError(f"{label('requests')} is {out['requests']}, fewer than the largest level "
                            f"({max(out['concurrency'])} streams): give at least that many requests per level, "
                            "or 0 to measure for window_s")
    return out


def _choice(value, label: str, allowed: tuple, what: str) -> str:
    text = str(value).strip().lower()
    if text not in allowed:
        raise SettingsError(f"{label} is {value!r}: give {what}")
    return text


def load_prompts(path: str, label: str = "prompts_file", fmt: str = "auto") -> list[dict]:
    """Prompt records (prompts.py) from a ShareGPT JSON, OpenAI chat JSONL or plain JSONL file,
    or the built-in set (``builtin``); errors name the file, the line and the field."""
    try:
        return prompt_sets.load(path, fmt, label)[0]
    except prompt_sets.PromptsError as exc:
        raise SettingsError(f"{label}: {exc}") from None


def public_settings(settings: dict) -> dict:
    """Settings as written to results: no api key, no prompt texts; what the prompt set was."""
    out = {k: v for k, v in settings.items() if k not in ("api_key", "prompts")}
    out["api_key_set"] = bool(settings.get("api_key"))
    records = settings.get("prompts")
    path = settings.get("prompts_file") or ""
    source = "synthesized" if not records else ("builtin" if path == prompt_sets.BUILTIN else "file")
    out["prompts_source"] = source
    out["prompts_count"] = len(records) if records else None
    if records:
        out["prompt_set"] = prompt_sets.describe(records, path or "given", settings.get("prompts_format", "auto"))
    return out


def describe_plan(settings: dict) -> str:
    mode = (f"{settings['requests']} requests per level" if settings["requests"]
            else f"{settings['warmup_s']:g} s warmup + {settings['window_s']:g} s window per level")
    if settings.get("target_rel_ci") and not settings["requests"]:
        mode += (f" (adaptive: until +-{100 * settings['target_rel_ci']:g} % and {settings['window_min_requests']} "
                 f"request durations, at most {settings['window_max_s'] or 4 * settings['window_s']:g} s)")
    target = settings["base_url"] or "the server the launch role starts"
    return (f"would sweep C={settings['concurrency']} against {target} ({settings['api']} API, "
            f"{settings['input_len']} in / {settings['output_len']} out tokens, {mode}, "
            f"{settings['repeats']} repeat(s))")

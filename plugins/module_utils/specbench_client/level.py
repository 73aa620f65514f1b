# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""One level: its worker processes forked and coordinated (one common window start), their
results merged, the /metrics poller beside them, repeats, cache flush and accept length.
"""
from __future__ import annotations

import math
import os
import pickle
import resource
import select
import struct
import time
from array import array

from . import engines
from .categories import category_figures, category_source
from .keepup import saturation
from .labels import level_at_node_speed
from .request import VOCAB, synth_prompt_tokens
from .server import MetricsPoller, flush_cache, http_call, server_accept_length, tokens_of
from .settings import SettingsError
from .summary import (
    FINE_BINS_PER_BATCH,
    LIFETIME_SOURCE,
    NO_SPEC_STEP_NOTE,
    empty_level_fields,
    server_went_down,
    summarize,
    window_rates,
)
from .telemetry import TelemetrySampler, level_energy, open_reader
from .worker import Worker, snap

RAMP_FRACTION = 0.5  # stream starts are spread over this part of the warmup
CALIBRATION_PROMPTS = 32  # synthesized prompts tokenized by the server to size them in its tokens
INPUT_TOLERANCE = 0.02  # warn when the prompts' mean server-token length is further off input_len
# A wall-clock step this large during a window is named (an NTP slew of 500 ppm moves a 100 s window 50 ms).
WALL_STEP_WARN_S = 0.05


def utc_ms(wall: float) -> str:
    """ISO 8601 UTC with milliseconds, e.g. 2026-12-01T05:41:02.123Z."""
    whole = int(wall)
    millis = int(round((wall - whole) * 1000))
    if millis == 1000:
        whole, millis = whole + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def window_in_utc(raw: dict | None) -> dict:
    """The (last) measurement window in wall-clock UTC, to hold against the server's counters.

    Every figure is timed on the monotonic clock; each edge is moved to the wall clock by the
    offset a worker read at that edge (Worker.wall_open, wall_close), so a step of the wall clock
    during the window (an NTP step, a VM paused for a snapshot or migration) moves neither edge:
    the edges then span the window plus the step, ``window_utc_step_s``, and a step of
    WALL_STEP_WARN_S or more is named."""
    if raw is None:
        return {"window_start_utc": None, "window_end_utc": None, "window_utc_step_s": None}
    opened, closed = raw["wall_open"], raw["wall_close"]
    out = {"window_start_utc": utc_ms(raw["ws"] + opened), "window_end_utc": utc_ms(raw["window_end"] + closed),
           "window_utc_step_s": round(closed - opened, 3)}
    if abs(closed - opened) >= WALL_STEP_WARN_S:
        out["warning"] = (
            f"the wall clock moved {closed - opened:+.3f} s against the monotonic clock during this window (an NTP "
            "step, or the machine paused: a VM snapshot, migration or suspend): the figures are timed on the "
            "monotonic clock and stand; the UTC edges were each read at their own edge, so they span the window "
            "plus that step (hold a server's counters against those edges, not against window_s)")
    return out


def calibrate_prompt_words(settings: dict, engine, model: str) -> dict | None:
    """Prompts of input_len of the server's own tokens (chat template included for the chat
    API), from the engine's tokenize endpoint: the template's tokens, then each VOCAB word's
    tokens (a byte-level BPE splits words apart first, so a prompt's count is their sum), then a
    check on synthesized prompts. None when the engine has no tokenize endpoint or the prompts
    are given. The native API's /generate ``text`` is tokenized as the completions API's prompt
    (no template), so it is sized the same way: unsized, its prompts held about twice the asked
    tokens on a real tokenizer (the synthesized words are several tokens each)."""
    if not engine.TOKENIZE_PATH or settings.get("prompts"):
        return None
    target = settings["input_len"]

    def body(text: str) -> dict:
        if settings["api"] == "chat":
            return {"messages": [{"role": "user", "content": text}]}
        return {"prompt": text}

    base = tokens_of(settings, engine, model, [body(""), {"prompt": ""}])
    words = tokens_of(settings, engine, model, [{"prompt": " " + w} for w in VOCAB])
    if not base or not words:
        return None
    overhead, bare = base
    costs = {w: n - bare for w, n in zip(VOCAB, words) if n - bare > 0}  # noqa: B905
    budget = target - overhead
    if budget < 1 or not costs:
        return None
    sample = [body(synth_prompt_tokens(settings["seed"], f"calibrate:{i}", costs, budget))
              for i in range(CALIBRATION_PROMPTS)]
    counts = tokens_of(settings, engine, model, sample)
    if not counts:
        return None
    return {"word_tokens": costs, "budget": budget, "template_tokens": overhead,
            "tokens_mean": round(sum(counts) / len(counts), 2), "tokens_min": min(counts), "tokens_max": max(counts),
            "source": f"POST {engine.TOKENIZE_PATH}: each word's tokens, then {CALIBRATION_PROMPTS} prompts checked"}


def resolve_workers(settings: dict, concurrency: int) -> int:
    if settings["workers"]:
        return max(1, min(settings["workers"], concurrency))
    return max(1, min(os.cpu_count() or 1, math.ceil(concurrency / 256)))


def ensure_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise SettingsError(f"{needed} streams in one process need {needed} open files, but the hard limit is "
                            f"{hard}: raise `ulimit -n` on the node or use more workers")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def adaptive_plan(settings: dict, workers: int) -> tuple[dict | None, str | None]:
    """(the worker's adaptive-window plan, or None; why not, when one was asked for). An adaptive
    window needs the whole level's rate in one process: with several worker processes (above
    256 streams by default) the window stays fixed at window_s."""
    if not settings.get("target_rel_ci") or settings["requests"]:
        return None, None
    if workers > 1:
        return None, f"{workers} worker processes: a fixed window of {settings['window_s']:g} s"
    max_s = settings.get("window_max_s") or 4 * settings["window_s"]
    return {"target": settings["target_rel_ci"], "min_durations": settings["window_min_requests"],
            "max_s": max_s, "check_s": max(0.1, min(1.0, settings["window_s"] / 20))}, None


def window_record(settings: dict, level: dict, plan: dict | None, why_not: str | None) -> dict:
    """What the level's window was: planned and used seconds, and for an adaptive one its target
    and whether it was reached (``target_reached: false`` at the maximum is a confounder)."""
    record = {"planned_s": settings["window_s"], "used_s": level.get("window_s"), "adaptive": plan is not None}
    if why_not:
        record["not_adaptive"] = why_not
    if plan is None:
        return record
    rate, ci = level.get("output_tok_per_s"), level.get("output_tok_per_s_ci95")
    reached = round((ci[1] - ci[0]) / 2 / rate, 4) if ci and rate else None
    e2e = (level.get("e2e_ms") or {}).get("mean")
    durations = round(level["window_s"] / (e2e / 1000.0), 2) if e2e and level.get("window_s") else None
    record.update(target_rel_ci=plan["target"], reached_rel_ci=reached, max_s=plan["max_s"],
                  min_request_durations=plan["min_durations"], request_durations=durations,
                  target_reached=bool(reached is not None and reached <= plan["target"]
                                      and durations is not None and durations >= plan["min_durations"]))
    return record


def _run_in_child(plan: dict, ids: list[int]) -> tuple[int, int, int]:
    """Fork one worker process; returns (pid, fd to read its messages, fd to send it the window start)."""
    res_r, res_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(res_r)
            os.close(ctl_w)
            try:
                result = Worker(plan, ids, ctrl_fd=ctl_r, status_fd=res_w).run()
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                result = {"crash": f"{type(exc).__name__}: {exc}"}
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(b"D" + struct.pack("Q", len(data)) + data)
            while view:
                n = os.write(res_w, view)
                view = view[n:]
        except BaseException:  # noqa: BLE001 - the child must never return into the caller
            code = 1
        finally:
            os._exit(code)
    os.close(res_w)
    os.close(ctl_r)
    return pid, res_r, ctl_w


def _coordinate(children: list, t0: float, bin_w: float) -> list[dict]:
    """Read every child's messages; once all are ready, send them the common window start."""
    bufs = {child[1]: b"" for child in children}
    ready: dict[int, float] = {}
    results: dict[int, dict] = {}
    open_fds = set(bufs)
    sent = False
    while open_fds:
        readable, unused_w, unused_x = select.select(list(open_fds), [], [], 1.0)
        for fd in readable:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                open_fds.discard(fd)
                ready.setdefault(fd, time.monotonic())
                continue
            buf = bufs[fd] + chunk
            while buf:
                if buf[:1] == b"R" and len(buf) >= 9:
                    ready[fd] = struct.unpack("d", buf[1:9])[0]
                    buf = buf[9:]
                elif buf[:1] == b"D" and len(buf) >= 9:
                    size = struct.unpack("Q", buf[1:9])[0]
                    if len(buf) < 9 + size:
                        break
                    results[fd] = pickle.loads(buf[9:9 + size])
                    buf = buf[9 + size:]
                else:
                    break
            bufs[fd] = buf
        if not sent and len(ready) == len(children):
            sent = True
            ws = struct.pack("d", snap(max(ready.values()), t0, bin_w))
            for child in children:
                try:
                    os.write(child[2], ws)
                except OSError:
                    pass
    out = []
    for pid, res_r, ctl_w in children:
        os.close(res_r)
        os.close(ctl_w)
        os.waitpid(pid, 0)
        out.append(results.get(res_r) or {"crash": f"worker process {pid} died without a result"})
    return out


def run_once(settings: dict, concurrency: int, model: str, key: str, trace: int = 0, reader=None) -> dict:
    """Run one level once; returns the workers' raw results merged (with the GPUs' telemetry over
    the window when ``reader`` reads them)."""
    workers = resolve_workers(settings, concurrency)
    per_worker = math.ceil(concurrency / workers)
    ensure_fd_limit(per_worker + 64)
    warmup, window = settings["warmup_s"], settings["window_s"]
    count_mode = settings["requests"] > 0
    batches = settings["batches"]
    t0 = time.monotonic() + 0.02 + 0.03 * workers
    ramp = warmup * RAMP_FRACTION
    starts = [t0 + ramp * i / concurrency for i in range(concurrency)]
    bin_w = 0.002 if count_mode else window / (batches * FINE_BINS_PER_BATCH)
    groups = [list(range(w, concurrency, workers)) for w in range(workers)]
    shares: list = [None] * workers
    if count_mode:  # an exact split of the request budget over the workers
        total = settings["requests"]
        shares = [total * len(ids) // concurrency for ids in groups]
        for i in range(total - sum(shares)):
            shares[i % workers] += 1
    adaptive = adaptive_plan(settings, workers)[0]
    plans = [{"settings": settings, "model": model, "t0": t0, "bin_w": bin_w, "starts": starts, "budget": share,
              "key": key, "trace": trace, "adaptive": adaptive, "widx": widx, "nworkers": workers}
             for widx, share in enumerate(shares)]
    poller = MetricsPoller(settings, t0) if settings.get("_metrics") else None
    sampler = TelemetrySampler(reader, settings["telemetry_interval_s"], t0) if reader else None
    try:
        if workers == 1:
            for thread in (poller, sampler):
                if thread:
                    thread.start()
            results = [Worker(plans[0], groups[0]).run()]
        else:
            children = [_run_in_child(plan, ids) for plan, ids in zip(plans, groups)]  # noqa: B905
            for thread in (poller, sampler):
                if thread:
                    thread.start()
            results = _coordinate(children, t0, bin_w)
    finally:
        for thread in (poller, sampler):
            if thread:
                thread.halt.set()
    if poller:  # its last read, sent after the halt, may take a few tries (MetricsPoller.FINAL_TRIES)
        poller.join(timeout=poller.FINAL_TRIES * (poller.FINAL_TIMEOUT_S + 1))
    if sampler:
        sampler.join(timeout=10.0)
    crashes = [r["crash"] for r in results if "crash" in r]
    if crashes:
        raise RuntimeError("a client worker process failed: " + "; ".join(crashes))
    merged = _merge(results)
    merged.update(t0=t0, bin_w=bin_w, workers=workers, concurrency=concurrency)
    window_rates(merged, settings)
    merged["telemetry"] = None
    if sampler and merged.get("window_end") is not None:
        merged["telemetry"] = sampler.over_window(merged["ws"], merged["window_end"])
        merged["window_tokens"] = sum(merged["window_fine"]) * bin_w
    if poller:
        merged["metrics"] = poller.result(merged["ws"], merged["window_end"])
        merged["metrics_error"] = poller.error
    else:
        merged["metrics"] = merged["metrics_error"] = None
    return merged


def _merge(results: list[dict]) -> dict:
    out: dict = {"kinds": {}, "examples": {}}
    for key in ("ok", "failed", "cut", "whole_tokens", "short", "spec_ct", "spec_verify", "exact"):
        out[key] = sum(r[key] for r in results)
    for key in ("ttft", "e2e", "tpot", "decode", "out_tokens", "requests", "in_tokens", "traces", "ends", "end_tokens",
                "end_verify", "end_category", "end_spec_tokens"):
        out[key] = [v for r in results for v in r[key]]
    itl = array("d")
    for r in results:
        itl.extend(r["itl"])
    out["itl"] = itl
    out["categories"] = results[0].get("categories") or []
    bins = [0.0] * max(len(r["bins"]) for r in results)
    for r in results:
        for i, v in enumerate(r["bins"]):
            bins[i] += v
    out["bins"] = bins
    for r in results:
        for kind, n in r["kinds"].items():
            out["kinds"][kind] = out["kinds"].get(kind, 0) + n
        for kind, msg in r["examples"].items():
            out["examples"].setdefault(kind, msg)
    firsts = [r["first_send"] for r in results if r["first_send"] is not None]
    lasts = [r["last_end"] for r in results if r["last_end"] is not None]
    out["first_send"] = min(firsts) if firsts else None
    out["last_end"] = max(lasts) if lasts else None
    wss = [r["ws"] for r in results if r["ws"] is not None]
    out["ws"] = max(wss) if wss else None
    wes = [r["we"] for r in results if r.get("we") is not None and math.isfinite(r["we"])]
    out["we"] = min(wes) if wes else None  # the planned window's end, or where an adaptive one closed
    fulls = [r["full_end"] for r in results if r["full_end"] is not None]
    out["full_end"] = min(fulls) if fulls else None
    reasons = [r["stop_reason"] for r in results if r["stop_reason"] not in (None, "window", "requests")]
    out["stop_reason"] = reasons[0] if reasons else None
    out["cpu"] = [r["cpu"] for r in results]
    out["lag"] = [r["lag"] for r in results]
    edges = [r.get("edge_tokens") for r in results]
    out["edge_tokens"] = [sum(e[0] for e in edges), sum(e[1] for e in edges)] if all(edges) else None
    for key in ("wall_open", "wall_close"):  # every worker read it within a housekeeping tick of the same edge
        out[key] = next((r[key] for r in results if r.get(key) is not None), None)
    out["window_end"] = None
    return out


def finished_in_window(raws: list[dict]) -> tuple[int, float, float]:
    """(requests, tokens, verify steps) of the requests that finished inside each repeat's window."""
    count, tokens, verify = 0, 0.0, 0.0
    for raw in raws:
        ws, we = raw.get("ws"), raw.get("window_end")
        if ws is None or we is None:
            continue
        for end, n, v in zip(raw["ends"], raw["end_tokens"], raw["end_verify"]):  # noqa: B905
            if ws <= end < we:
                count += 1
                tokens += n
                verify += v
    return count, tokens, verify


def accept_length_of(raws: list[dict], level: dict, settings: dict, engine, spec: bool, accept_server: list,
                     flushed_all: bool) -> dict:
    """The level's accept length and where it came from, the source that covers the window most
    exactly first: the native API's per-request spec_verify_ct over the requests finished in the
    window; the engine's counters over the window (/metrics); the server's description after the
    repeat (SGLang: every DP rank's lifetime figure since the flush, folded only at its decode log)."""
    out = {"accept_length": None, "accept_length_source": None}
    for key in ("_spec_verify", "_spec_ct", "_spec_verify_sum"):
        level.pop(key, None)
    if not spec:
        return out
    # Per request, each verify step counted with the tokens it gave: /generate's spec_verify_ct, or on
    # SGLang's OpenAI APIs sglext.spec_tokens_details (asked for with engine.SPEC_REQUEST_FIELDS).
    per_request = None
    if settings["api"] == "native":
        per_request = "/generate per request: sum(completion_tokens) / sum(spec_verify_ct)"
    elif engine.SPEC_REQUEST_FIELDS:
        per_request = (f"{settings['api']} API per request: sum(completion_tokens) / sum(spec_verify_ct) of "
                       "sglext.spec_tokens_details")
    if per_request:
        count, tokens, verify = finished_in_window(raws)
        if verify > 0:
            out["accept_length"] = round(tokens / verify, 4)
            out["accept_length_source"] = f"{per_request} over the {count} requests finished in the window"
            return out
        tokens = sum(r["spec_ct"] for r in raws)
        verify = sum(r["spec_verify"] for r in raws)
        if verify > 0:  # no request finished inside the window: those sent in it, finished after
            out["accept_length"] = round(tokens / verify, 4)
            out["accept_length_source"] = f"{per_request} over the requests sent in the window (none finished inside it)"
            return out
    counted = [r["metrics"]["accept_length"] for r in raws if (r.get("metrics") or {}).get("accept_length")]
    if counted:
        out["accept_length"] = round(sum(counted) / len(counted), 4)
        if engine.SPEC_VERIFY:
            out["accept_length_source"] = (f"/metrics over the window: delta({engine.GENERATED.decode()}) / "
                                           f"delta({engine.SPEC_VERIFY.decode()}), both counted as requests finish")
        else:
            out["accept_length_source"] = ("/metrics spec_decode counters over the window: "
                                           "1 + delta(accepted) / delta(drafts)")
        bounds = [r["metrics"].get("accept_length_bounds") for r in raws if (r.get("metrics") or {}).get("accept_length")]
        if len(bounds) == 1 and bounds[0]:
            out["accept_length_bounds"] = bounds[0]  # what the scrapes at the window's edges allow
        return out
    steps = [level.get(k) for k in ("server_spec_drafts", "server_spec_verify_calls") if level.get(k) is not None]
    if steps and not any(steps) and level.get("requests_ok"):
        # The engine's counters were read over the window and counted no draft, no verify step: no
        # speculative step ran there (an adaptive table or a schedule off at this batch size). The
        # server's lifetime figure below describes other batch sizes, never this window: none is given.
        out["accept_length_note"] = NO_SPEC_STEP_NOTE
        return out
    if accept_server:
        out["accept_length"] = round(sum(a["value"] for a in accept_server) / len(accept_server), 4)
        ranks = accept_server[-1]
        out["accept_length_source"] = (
            f"{ranks['path']} {LIFETIME_SOURCE}, mean over {ranks['ranks']} of "
            f"{ranks['of']} DP ranks: lifetime since "
            + ("/flush_cache" if settings["flush_cache"] and flushed_all else "the server started (no flush)")
            + ", folded in only every --decode-log-interval decode batches, so not exactly the window")
    return out


def token_counts_of(raws: list[dict], level: dict, settings: dict, engine, calibration) -> dict:
    """Where the tokens per chunk and the prompts' sizes came from (``token_count_source``), with a
    warning where the engine offers exact counts but the server did not give them."""
    out: dict = {}
    measured = level.get("requests_measured") or 0
    exact = sum(r.get("exact", 0) for r in raws)
    if settings["api"] == "native":
        out["token_count_source"] = "/generate meta_info.completion_tokens in every chunk (exact)"
    elif measured and exact == measured:
        out["token_count_source"] = "usage in every chunk (stream_options.continuous_usage_stats; exact)"
    elif measured:
        out["token_count_source"] = (f"words per chunk, scaled to usage.completion_tokens of each request "
                                     f"({measured - exact} of {measured} requests had no usage in their chunks)")
        if engine.STREAM_OPTIONS:
            level["warnings"].append(
                "the server sent no usage in its stream chunks although asked (stream_options.continuous_usage_stats):"
                " tokens per chunk are word counts scaled to each request's total, so ITL and the window's edges "
                "are estimates")
    else:
        out["token_count_source"] = None
    if engine.TOKENIZE_PATH and not calibration and not settings.get("prompts"):
        level["warnings"].append(f"the server did not answer POST {engine.TOKENIZE_PATH}: prompts are sized in "
                                 "words, not in its tokens (input_tokens_mean says what they held)")
        out["prompt_calibration"] = None
    return out


def gpu_telemetry_of(raws: list[dict], reader, no_reader: str | None, settings: dict) -> dict:
    """The GPUs' telemetry over each repeat's window (``gpu_telemetry``, one entry a repeat) and
    the level's energy per output token, with the throttling or clock changes seen named."""
    if settings["telemetry_interval_s"] <= 0:
        return {"gpu_telemetry": None, "energy_j_per_output_token": None, "energy_note": "telemetry_interval_s is 0"}
    if reader is None:
        return {"gpu_telemetry": None, "energy_j_per_output_token": None,
                "energy_note": f"no GPU telemetry: {no_reader}"}
    windows = [r.get("telemetry") for r in raws]
    out = {"gpu_telemetry": windows}
    out.update(level_energy(windows, [r.get("window_tokens") or 0 for r in raws]))
    out["energy_confounders"] = sorted({c for w in windows if w for c in w.get("confounders", [])})
    if out["energy_j_per_output_token"] is None:
        errors = [w["error"] for w in windows if w and w.get("error")]
        out["energy_note"] = "no window with GPU samples either side" + (f": {errors[0]}" if errors else "")
    return out


def run_level(settings: dict, concurrency: int, server: dict, trace: int = 0) -> dict:
    """Measure one level (all its repeats); the returned dict is the level's result."""
    started = time.time()
    t_start = time.monotonic()
    settings = dict(settings, _metrics=bool(server.get("metrics_available")))
    spec = bool(server.get("speculative_algorithm"))
    engine = engines.for_server(server)
    level: dict = {"concurrency": concurrency, "api": settings["api"], "error": None, "warnings": []}
    if engine.STREAM_OPTIONS:
        settings["_stream_options"] = engine.STREAM_OPTIONS
    if spec and engine.SPEC_REQUEST_FIELDS:
        settings["_spec_request_fields"] = engine.SPEC_REQUEST_FIELDS
    settings["_rate_tolerance"] = engine.RATE_TOLERANCE
    settings["_generated_on_finish"] = engine.GENERATED_ON_FINISH
    raws = []
    accept_server = []
    flushed_all = True
    reader, no_reader = (open_reader(server, settings["base_url"]) if settings["telemetry_interval_s"] > 0
                         else (None, None))
    try:
        calibration = calibrate_prompt_words(settings, engine, server["model"])
        if calibration:
            settings["_word_tokens"] = calibration["word_tokens"]
            settings["_prompt_budget"] = calibration["budget"]
            level["prompt_calibration"] = {k: v for k, v in calibration.items() if k != "word_tokens"}
        for rep in range(settings["repeats"]):
            settings["_repeat"] = rep  # the workers' progress says which repeat runs (the level's ETA counts the rest)
            if settings["flush_cache"] and spec:
                flushed_all = flush_cache(settings, engine=engine) and flushed_all
            raw = run_once(settings, concurrency, server["model"], f"c{concurrency}r{rep}", trace=trace, reader=reader)
            raws.append(raw)
            if spec and settings["api"] != "native":
                value = server_accept_length(settings, engine, server.get("info_path"))
                if value is not None:
                    accept_server.append(value)
            if raw["ok"] == 0 or raw["stop_reason"]:
                break
    except (OSError, RuntimeError, SettingsError) as exc:
        level["error"] = f"C={concurrency}: the client failed: {exc}"
        level.update(empty_level_fields())
        return level_at_node_speed(level, server)
    finally:
        if reader:
            reader.close()
    level.update(summarize(raws, settings, concurrency))
    level["window"] = window_record(settings, level, *adaptive_plan(settings, raws[0]["workers"]))
    level.update(accept_length_of(raws, level, settings, engine, spec, accept_server, flushed_all))
    level.update(token_counts_of(raws, level, settings, engine, calibration))
    level.update(gpu_telemetry_of(raws, reader, no_reader, settings))
    level["lengths"] = settings.get("lengths", "fixed")  # fixed: output_len each; data: each prompt's own, capped
    per_category = category_figures(raws, level)
    if per_category is not None:
        level["categories"] = per_category
        level["categories_source"] = category_source(settings, engine, spec, per_category)
    if spec and settings["flush_cache"] and engine.FLUSH_PATH:
        level["cache_flushed"] = flushed_all  # POST /flush_cache answered 200 before every repeat
    if spec and level["accept_length"] is None and level["requests_ok"] and not level.get("accept_length_note"):
        level["warnings"].append("speculative server, but no accept length: no spec_verify_ct in /generate, no "
                                 "spec-decode counters in /metrics over the window, no avg_spec_accept_length in "
                                 f"{server.get('info_path') or engine.INFO_PATH}")
    # A step verifies at most speculative_num_draft_tokens tokens (the server args in SGLang's /server_info,
    # build_server_info in sglang/srt/entrypoints/http_server.py; the draft
    # tokens plus the bonus one). More per verify call means the window mixed speculative steps
    # with plain ones, which add tokens and no verify call: --speculative-adaptive switching
    # speculation off at this batch size. The counters then cannot give the accept length.
    ceiling = (server.get("server_info") or {}).get("speculative_num_draft_tokens")
    if (isinstance(ceiling, (int, float)) and not isinstance(ceiling, bool) and ceiling > 0
            and (level.get("accept_length") or 0) > ceiling):
        level["warnings"].append(
            f"accept length {level['accept_length']:g} from {level['accept_length_source']} is more than the "
            f"{ceiling:g} tokens a verify step can take: plain decode steps (adaptive speculation off at this "
            "batch size) were counted with the speculative ones, so no accept length is given")
        level.update(accept_length=None, accept_length_source=None)
        level.pop("accept_length_bounds", None)
    if server.get("metrics_available") is False:
        level["server_note"] = "no /metrics (start SGLang with --enable-metrics for running/queued counts)"
    timed = [r for r in raws if r.get("ws") is not None and r.get("window_end") is not None]
    edges = window_in_utc(timed[-1] if timed else None)
    if "warning" in edges:
        level["warnings"].append(edges.pop("warning"))
    level.update(edges)
    if calibration and level.get("input_tokens_mean"):
        off = level["input_tokens_mean"] / settings["input_len"] - 1
        if abs(off) > INPUT_TOLERANCE:
            level["warnings"].append(
                f"the prompts held {level['input_tokens_mean']:.1f} of the server's tokens on average, "
                f"{100 * off:+.1f}% off input_len {settings['input_len']}: the calibration on "
                f"{CALIBRATION_PROMPTS} prompts did not carry over (give prompts of your own with prompts_file)")
    # A level the client or the engine could not serve at the node's speed is named, never used. One
    # whose server went down failed (its error says so, verdict.level_failure reads it): a dead
    # server's unanswered /metrics and lost rate are no saturation, and the level is not measured again.
    level["saturated"] = [] if server_went_down(level) else saturation(settings, server, level, http_call)
    level["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    level["duration_s"] = round(time.monotonic() - t_start, 3)
    if trace:
        level["_traces"] = [t for raw in raws for t in raw["traces"]]
    # On the emulator: every figure at the emulated node's speed, the measured ones as wall_clock_*.
    return level_at_node_speed(level, server)

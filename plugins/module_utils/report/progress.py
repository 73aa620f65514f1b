# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The plan a run prints at its start and the live progress lines of its sweeps (controller side).

One implementation for the action plugins run_plan (the plan and its wall-time estimate) and
bench_sweep (a line every ``interval`` seconds while a level runs): the lines go to the
ansible-playbook output (and so to ansible-runner's and AWX's job events), and each as one JSON
record to ``progress.jsonl`` in the run's results folder.
"""
from __future__ import annotations

import glob
import json
import os
import statistics
import time

PROGRESS_FILE = "progress.jsonl"
INTERVAL_DEFAULT_S = 10.0
# A line more often than this scrolls past unread (and costs a read of the node each time).
INTERVAL_FLOOR_S = 5.0
INTERVAL_MAX_S = 600.0
# Per level, beyond its warmup and window: the module's start on the node, the probe, the summary.
LEVEL_OVERHEAD_S = 3.0
# Of it, after the window closes: the requests cut, the summary, the module's return.
LEVEL_TAIL_S = 1.0
# Per launch, beyond the model load: the teardown before and after it and the scripts' check.
LAUNCH_OVERHEAD_S = 15.0
# A model load with no launch of this engine on record for the node (engine -> seconds).
DEFAULT_LOAD_S = {"emulator": 10.0, "vllm": 120.0, "sglang": 300.0}
LOAD_HISTORY = 5  # the node's last launches read for its load time


class ProgressError(ValueError):
    """A progress setting that cannot be used; the message names the variable and the fix."""


def check_interval(value, name: str = "bench_progress_interval_s") -> float:
    """Seconds between progress lines, from INTERVAL_FLOOR_S to INTERVAL_MAX_S."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not INTERVAL_FLOOR_S <= seconds <= INTERVAL_MAX_S:
        raise ProgressError(f"{name}={value!r}: give the seconds between progress lines, from "
                            f"{INTERVAL_FLOOR_S:g} (more often does not stay readable) to {INTERVAL_MAX_S:g}, e.g. 10")
    return seconds


def duration(seconds) -> str:
    """12s, 3m05s, 1h02m."""
    if seconds is None:
        return "-"
    s = max(0, int(round(float(seconds))))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def append_record(results_run_dir: str, record: dict) -> None:
    """One JSON line appended to <results>/<run_id>/progress.jsonl (O_APPEND: hosts' lines never interleave)."""
    os.makedirs(results_run_dir, exist_ok=True)
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode("utf-8")
    fd = os.open(os.path.join(results_run_dir, PROGRESS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def worker_totals(text: str) -> dict | None:
    """The client workers' progress files (one JSON line each, bench_sweep's progress_path) summed:
    requests ok and failed, tokens read, whether the window is open. None when none was readable."""
    totals = {"ok": 0, "failed": 0, "tokens": 0, "window": False, "workers": 0}
    for line in (text or "").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        totals["workers"] += 1
        for key in ("ok", "failed", "tokens"):
            totals[key] += int(rec.get(key) or 0)
        totals["window"] = totals["window"] or bool(rec.get("window"))
        for key in ("repeat", "repeats"):  # which of the level's repeats runs (bench_repeats)
            if isinstance(rec.get(key), int) and not isinstance(rec.get(key), bool):
                totals[key] = max(rec[key], totals.get(key) or 0)
        for key in ("window_left_s", "warmup_left_s", "drain_s", "drain_left_s"):  # the level's: the latest worker's
            if isinstance(rec.get(key), (int, float)) and not isinstance(rec.get(key), bool):
                totals[key] = max(float(rec[key]), totals.get(key) or 0.0)
    if "window_left_s" in totals:
        totals.pop("warmup_left_s", None)  # one worker already in the window: the level is
    return totals if totals["workers"] else None


def level_seconds(settings: dict) -> float:
    """A level's expected seconds: its repeats' warmup and window (an adaptive window at its planned
    length; it may run to window_max_s), plus LEVEL_OVERHEAD_S."""
    repeats = max(1, int(settings.get("repeats") or 1))
    return repeats * (float(settings.get("warmup_s") or 0) + float(settings.get("window_s") or 0)) + LEVEL_OVERHEAD_S


def load_history(results_dir: str, host: str, engine: str, exclude_run: str = "") -> list[float]:
    """The model-load seconds (``server.ready_s``) of this node's last launches of this engine on record
    in the results folder, newest first, at most LOAD_HISTORY."""
    found = []
    for path in glob.glob(os.path.join(glob.escape(results_dir), "*", glob.escape(host), "*.json")):
        if exclude_run and os.path.basename(os.path.dirname(os.path.dirname(path))) == exclude_run:
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                doc = json.load(handle)
        except (OSError, ValueError):
            continue
        server = doc.get("server") if isinstance(doc, dict) else None
        if not isinstance(server, dict) or doc.get("engine") != engine:
            continue
        ready = server.get("ready_s")
        if isinstance(ready, (int, float)) and not isinstance(ready, bool) and ready >= 0:
            found.append((doc.get("started_at") or "", float(ready)))
    found.sort(reverse=True)
    return [ready for _when, ready in found[:LOAD_HISTORY]]


def load_estimate(results_dir: str, host: str, engine: str, exclude_run: str = "") -> tuple[float, str]:
    """(seconds, how it was estimated) for one model load on this node."""
    history = load_history(results_dir, host, engine, exclude_run)
    if history:
        return (statistics.median(history),
                f"median of the node's last {len(history)} {engine} launches on record ({results_dir})")
    default = DEFAULT_LOAD_S.get(engine, DEFAULT_LOAD_S["sglang"])
    return default, f"no {engine} launch on record for this node: a stated default of {default:g} s"


def plan(host: str, engine: str, launches: list, settings: dict, results_dir: str, run_id: str) -> dict:
    """The launches in order with each one's expected seconds, their sum and how it was estimated.

    ``launches``: [{"mode", "launch", "levels"}] in the order they run; ``"load": False`` for a sweep of a
    server that already runs (no model load, no teardown). ``run_id`` empty: every launch on record is the
    node's history (serve.yml's plan, of a finished run)."""
    load_s, load_how = load_estimate(results_dir, host, engine, exclude_run=run_id)
    per_level = level_seconds(settings)
    rows = []
    for item in launches:
        levels = list(item.get("levels") or [])
        load = item.get("load", True) not in (False, "false", "False")
        rows.append({"mode": item.get("mode"), "launch": item.get("launch"), "levels": levels, "load": load,
                     "expected_s": round((load_s + LAUNCH_OVERHEAD_S if load else 0) + per_level * len(levels), 1)})
    total = round(sum(r["expected_s"] for r in rows), 1)
    how = (f"per launch {load_s:.0f} s model load ({load_how}) + {LAUNCH_OVERHEAD_S:g} s teardown and checks; "
           f"per level {per_level:g} s ({settings.get('repeats') or 1} x ({float(settings.get('warmup_s') or 0):g} s "
           f"warm-up + {float(settings.get('window_s') or 0):g} s window) + {LEVEL_OVERHEAD_S:g} s)")
    return {"host": host, "engine": engine, "launches": rows, "expected_s": total, "load_s": load_s,
            "level_s": per_level, "estimated_how": how}


def remaining_after(plan_fact: dict | None, launch: int | None) -> float:
    """Expected seconds of the planned launches after launch number ``launch`` (1-based), 0 if unknown."""
    if not isinstance(plan_fact, dict) or not launch:
        return 0.0
    rows = plan_fact.get("launches") or []
    return float(sum(r.get("expected_s") or 0 for r in rows[int(launch):]))


def level_eta_s(totals: dict | None, level_elapsed: float, level_expected: float, window_s: float) -> float:
    """Seconds left in a level, from what its client workers last wrote (once a second) on the node
    (worker.Worker._write_progress): once the window is over, the requests in flight draining; while
    it is open, its seconds left and the drain expected after it; before, the warm-up's minimum left,
    the window and the drain; plus LEVEL_TAIL_S for the summary. The warm-up also waits for every
    stream to finish a request, which no clock says: its ETA holds until the window opens. Before the
    workers write (the module starting on the node), the plan's level time less the time gone, never
    less than the window (a level running past the plan's time, its warm-up waiting for long requests,
    its module slow to start on a loaded node, still shows what it has left). A level of several repeats
    (bench_repeats; the workers say which runs) adds each repeat still to come at the plan's share of the
    level and the drain."""
    window_s = max(0.0, float(window_s or 0))
    totals = totals or {}
    drain = float(totals.get("drain_s") or 0.0)
    repeats = int(totals.get("repeats") or 1)
    later = 0.0
    if repeats > 1 and totals.get("repeat") is not None:
        each = max(0.0, (float(level_expected) - LEVEL_OVERHEAD_S) / repeats)
        later = max(0, repeats - 1 - int(totals["repeat"])) * (each + drain)
    if totals.get("drain_left_s") is not None:
        return float(totals["drain_left_s"]) + later + LEVEL_TAIL_S
    if totals.get("window_left_s") is not None:
        return float(totals["window_left_s"]) + drain + later + LEVEL_TAIL_S
    if totals.get("warmup_left_s") is not None:
        return float(totals["warmup_left_s"]) + window_s + drain + later + LEVEL_TAIL_S
    return max(level_expected - level_elapsed, window_s + LEVEL_TAIL_S)


def progress_record(host: str, mode: str, launch: int | None, launches: int | None, level_index: int,
                    levels: int, concurrency: int, phase: str, totals: dict | None, level_elapsed: float,
                    level_expected: float, run_started: float | None, run_remaining: float, now: float,
                    window_s: float = 0.0) -> dict:
    """One live progress record (and its line) while a level runs; its ETA is level_eta's."""
    tok_s = None
    if totals and level_elapsed > 0:
        tok_s = round(totals["tokens"] / level_elapsed, 1)
    level_eta = level_eta_s(totals, level_elapsed, level_expected, window_s)
    run_elapsed = (now - run_started) if run_started else None
    run_eta = level_eta + (levels - level_index) * level_expected + run_remaining
    record = {
        "event": "level_progress", "host": host, "mode": mode, "launch": launch, "launches": launches,
        "level": level_index, "levels": levels, "concurrency": concurrency, "phase": phase,
        "requests_ok": totals["ok"] if totals else None, "requests_failed": totals["failed"] if totals else None,
        "output_tok_per_s_so_far": tok_s, "source": "client-side count, wall-clock, since the level's start",
        "level_elapsed_s": round(level_elapsed, 1), "level_eta_s": round(level_eta, 1),
        "run_elapsed_s": round(run_elapsed, 1) if run_elapsed is not None else None,
        "run_eta_s": round(run_eta, 1), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "unix_s": round(now, 3),
        **{key: (totals or {}).get(key) for key in ("warmup_left_s", "window_left_s", "drain_s", "drain_left_s")},
    }
    record["line"] = progress_text(record)
    return record


def launch_label(launch, launches) -> str:
    if launch and launches:
        return f"launch {launch}/{launches}"
    return "added launch" if launch else "launch"


def progress_text(rec: dict) -> str:
    """The record as the line printed."""
    if rec.get("requests_ok") is None:
        counts = "requests - (no progress from the client yet)"
    else:
        counts = f"requests {rec['requests_ok']} done, {rec['requests_failed']} failed"
    tok = rec.get("output_tok_per_s_so_far")
    rate = f"{tok:.1f} tok/s so far (client, wall-clock)" if tok is not None else "tok/s -"
    run = (f"run {duration(rec['run_elapsed_s'])}, ETA {duration(rec['run_eta_s'])}"
           if rec.get("run_elapsed_s") is not None else f"run ETA {duration(rec['run_eta_s'])}")
    return (f"{rec['host']} | progress | {launch_label(rec.get('launch'), rec.get('launches'))} {rec['mode']} | "
            f"level {rec['level']}/{rec['levels']} C={rec['concurrency']} {rec['phase']} | {counts} | {rate} | "
            f"level {duration(rec['level_elapsed_s'])}, ETA {duration(rec['level_eta_s'])} | {run}")


def plan_lines(plan_fact: dict, header: dict) -> list[str]:
    """The plan as printed: one line for the settings, one per launch, one for the estimate."""
    host = plan_fact["host"]
    lines = [f"{host} | plan | {header.get('playbook')}: hosts {', '.join(header.get('hosts') or [host])}; modes "
             f"{', '.join(header.get('modes') or [])}; warm-up {float(header.get('warmup_s') or 0):g} s, window "
             f"{float(header.get('window_s') or 0):g} s"
             + (f" (adaptive to {float(header['window_max_s']):g} s)" if header.get("window_max_s") else "")
             + f"; progress every {header.get('interval_s'):g} s"]
    if header.get("served"):
        lines.append(f"{host} | plan | serves {header['served']}")
    if header.get("budget"):
        lines.append(f"{host} | plan | after the planned launches: {header['budget']}")
    n = len(plan_fact["launches"])
    for i, row in enumerate(plan_fact["launches"], 1):
        lines.append(f"{host} | plan | {'launch' if row.get('load', True) else 'sweep'} {i}/{n}: {row['mode']}"
                     + (f" (its launch {row['launch']})" if row.get("launch") else "")
                     + f", levels {row['levels']}, about {duration(row['expected_s'])}")
    if not n:
        lines.append(f"{host} | plan | nothing to launch or measure")
    lines.append(f"{host} | plan | expected wall time about {duration(plan_fact['expected_s'])} "
                 f"(the planned launches; added rounds not counted): {plan_fact['estimated_how']}")
    return lines


# The options of run_plan (its module documents them; its action plugin validates with them).
PLAN_ARGUMENT_SPEC = {
    "playbook": {"type": "str", "required": True},
    "results_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "engine": {"type": "str", "default": "emulator"},
    "hosts": {"type": "list", "elements": "str", "default": []},
    "modes": {"type": "list", "elements": "str", "default": []},
    "launches": {"type": "list", "elements": "dict", "default": []},
    "warmup_s": {"type": "float", "default": 0},
    "window_s": {"type": "float", "default": 0},
    "window_max_s": {"type": "float", "default": 0},
    "repeats": {"type": "int", "default": 1},
    "interval_s": {"type": "raw", "default": INTERVAL_DEFAULT_S},
    "budget": {"type": "str", "default": ""},
}
PLAN_ARGUMENT_SPEC.update({
    "resume": {"type": "bool", "default": False},
    "fingerprint": {"type": "dict", "default": {}},
    "complete": {"type": "bool", "default": False},
    "run_state": {"type": "bool", "default": True},
    "progress_dir": {"type": "path", "default": ""},
    "served": {"type": "str", "default": ""},
})


# -- the run's state: running, incomplete (interrupted), complete; its attempts --------------------
RUN_STATE_FILE = "run-state.json"


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read_run_state(run_dir: str) -> dict | None:
    try:
        with open(os.path.join(run_dir, RUN_STATE_FILE), encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def write_run_state(run_dir: str, state: dict) -> None:
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, RUN_STATE_FILE)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=2, sort_keys=True, default=str)
        handle.write("\n")
    os.replace(tmp, path)


def resume_command(state: dict) -> str:
    return (f"ansible-playbook {state.get('playbook_file') or 'playbooks/' + str(state.get('playbook')) + '.yml'} "
            f"-e run_id={state.get('run_id')} -e resume=true")


def start_attempt(run_dir: str, run_id: str, playbook: str, fingerprint: dict, resume: bool) -> dict:
    """The run's state at its start: a new run (attempt 1), or with ``resume`` the next attempt of an
    incomplete run of identical settings. ProgressError, before anything runs, when the run to resume is
    missing, complete or was made with other settings, or when an incomplete run would be overwritten."""
    state = read_run_state(run_dir)
    fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
    if resume:
        if state is None:
            raise ProgressError(f"resume=true, but {run_dir} holds no run to resume ({RUN_STATE_FILE} is missing): give "
                                "the run_id of an interrupted run (its message and its folder's run-state.json name "
                                "it), or leave resume out to start a new run")
        # "running": a run killed outright (an AWX cancel: ansible-runner kills the process group) could not mark
        # itself; a run still going holds the node lock, so this one would wait for it or fail naming it.
        if state.get("status") == "complete":
            raise ProgressError(f"resume=true, but run {run_id} is complete: nothing is missing. Leave resume out "
                                "(and give another run_id) to measure again")
        differ = sorted(k for k in set(fingerprint) | set(state.get("settings") or {})
                        if fingerprint.get(k) != (state.get("settings") or {}).get(k))
        if differ:
            raise ProgressError(f"resume=true, but run {run_id} was made with other settings ({', '.join(differ)} "
                                "differ): a resumed run measures only what is missing with the same settings. Give "
                                "the same inventory and variables as the interrupted run, or start a new run "
                                "(another run_id, without resume)")
        attempts = list(state.get("attempts") or [])
        if state.get("status") == "running" and attempts:
            # Its last attempt never said how it ended: a SIGKILL (ansible-runner's cancel) or a crash.
            attempts[-1].setdefault("ended", "stopped outright (no word from it: an AWX cancel, a kill or a crash)")
    else:
        if state is not None and state.get("status") == "incomplete":
            raise ProgressError(f"run {run_id} already exists in {run_dir} and is incomplete (interrupted): resume "
                                f"it with -e resume=true ({resume_command(state)}), or give another run_id")
        attempts = []
    attempts.append({"attempt": len(attempts) + 1, "started_at": _now_iso()})
    prior = state.get("status") if (resume and state) else None
    state = {"run_id": run_id, "playbook": playbook, "status": "running", "settings": fingerprint,
             "attempts": attempts}
    if prior:
        state["resumed_from"] = prior
    state["message"] = (f"running; if it stops before its end (Ctrl-C, an AWX cancel, a crash), the levels measured "
                        f"stay here and {resume_command(state)} resumes it")
    write_run_state(run_dir, state)
    return state


def current_attempt(run_dir: str) -> int:
    state = read_run_state(run_dir) or {}
    return len(state.get("attempts") or []) or 1


def mark_incomplete(run_dir: str, why: str) -> str:
    """The run marked incomplete, with the message saying how to resume it (returned)."""
    state = read_run_state(run_dir) or {"run_id": os.path.basename(run_dir), "attempts": [], "playbook": "compare"}
    message = (f"Run {state.get('run_id')} is incomplete ({why}): every level measured is kept in {run_dir}. "
               f"Resume it with the same inventory and settings: {resume_command(state)} "
               "(only the missing levels are measured, the report names each level's attempt).")
    state.update(status="incomplete", message=message, interrupted_at=_now_iso())
    if state.get("attempts"):
        state["attempts"][-1]["ended"] = why
    write_run_state(run_dir, state)
    return message


def mark_complete(run_dir: str) -> dict | None:
    state = read_run_state(run_dir)
    if state is not None:
        state.update(status="complete", message=None, finished_at=_now_iso())
        write_run_state(run_dir, state)
    return state


def attempts_of(host_runs: dict) -> list[dict]:
    """Which levels of each results file came from which attempt (results of a resumed run name them);
    empty when every level came from the run's first attempt."""
    rows = []
    for mode, found in host_runs.items():
        for _tag, doc in found:
            by_attempt: dict = {}
            for level in doc.get("levels") or []:
                by_attempt.setdefault(int(level.get("attempt") or 1), []).append(level.get("concurrency"))
            rows.append({"mode": mode, "file": os.path.basename(doc.get("_path") or ""),
                         "attempts": {str(k): v for k, v in sorted(by_attempt.items())}})
    if not any(set(r["attempts"]) - {"1"} for r in rows):
        return []
    return sorted(rows, key=lambda r: r["file"])


def attempts_lines(rows: list[dict]) -> list[str]:
    """The report's section on a resumed run: per results file, the levels of each attempt."""
    if not rows:
        return []
    lines = ["## Attempts", "",
             "This run was interrupted and resumed: each level was measured once, in the attempt named here "
             "(a resumed attempt launched the mode again and measured only the levels still missing).", ""]
    for row in rows:
        parts = [f"attempt {k}: C={', C='.join(str(c) for c in v)}" for k, v in row["attempts"].items()]
        lines.append(f"- `{row['file']}` ({row['mode']}): " + "; ".join(parts))
    lines.append("")
    return lines

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Action bench_sweep: run the concurrency sweep from the controller.

The module of the same name measures on the managed node, next to the server. This plugin
calls it once to read what the server says about itself, then drives the client core's
sweep (its one loop over the levels, with its stop rule) with a measure step that runs one
level through the module; after each level the sweep's callback prints one progress line
and rewrites the results file on the controller, so a crash at C=250 loses nothing
measured at C=1..100. At the end it returns the levels as the fact ``specbench_sweep``.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import threading
import time
import uuid

from ansible.plugins.action import ActionBase

from ansible_collections.specbench.core.plugins.module_utils.report import progress as live
from ansible_collections.specbench.core.plugins.module_utils.specbench_client import (
    DEFAULTS,
    SettingsError,
    category_settings,
    check_mode_against_server,
    describe_plan,
    describe_running,
    format_level_line,
    load_prompts,
    normalize_settings,
    public_settings,
    redact,
    sweep,
    sweep_outcome,
    unmeasured_level,
    write_json_atomic,
)

MODULE = "specbench.core.bench_sweep"
SETTINGS = tuple(k for k in DEFAULTS if k != "prompts") + ("prompts_file",)
OWN = ("mode", "engine", "run_id", "results_file", "server", "validate_only", "output_match_prompts",
       "output_match_tokens", "progress_interval_s", "launch", "launches", "run_started", "plan", "resume",
       "progress_dir")
MODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RESULTS_SCHEMA = "specbench.bench_sweep/1"


def role_label(key: str) -> str:
    """The variable a person sets for ``key`` (bench_window_s, base_url...)."""
    return "base_url" if key == "base_url" else f"bench_{key}"


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def check_mode_name(mode) -> str:
    if not isinstance(mode, str) or not mode.strip():
        raise SettingsError("mode is not set: give the serving mode the results are filed under, e.g. "
                            "-e mode=baseline (or eagle3, eagle, nextn, ngram, standalone, eagle3-adaptive)")
    if not MODE_RE.match(mode):
        raise SettingsError(f"mode {mode!r} cannot name a results file: use letters, digits, '.', '_' and '-', "
                            "e.g. baseline or eagle3")
    return mode


def check_output_match(prompts, tokens) -> tuple[int, int]:
    """(prompts, tokens) of the output match; SettingsError naming the variable and the fix."""
    try:
        count, length = int(str(prompts)), int(str(tokens))
    except ValueError:
        count = length = -1
    if count < 0 or count > 64 or length < 1:
        raise SettingsError(f"bench_output_match_prompts must be a whole number from 0 (off) to 64 and "
                            f"bench_output_match_tokens one of 1 or more (got {prompts!r} and {tokens!r}), e.g. 8 and 32")
    return count, length


def check_results_file(path) -> str:
    if not isinstance(path, str) or not path.strip():
        raise SettingsError("results_file is not set (the role bench_sweep sets it from specbench_results_dir, "
                            "specbench_run_id, the host and the mode)")
    folder = os.path.dirname(os.path.abspath(path))
    probe = folder
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
        raise SettingsError(f"the results folder {folder} cannot be created or written ({probe} is not a writable "
                            "folder): set results_dir to a folder you can write")
    return path


def no_level_reason(res: dict) -> str:
    """Why a level's module run gave no level: its message, else what it did return (the result's
    keys, exit status and the ends of its output), so that the error can be traced."""
    if res.get("msg"):
        return str(res["msg"])
    seen = [f"keys {sorted(res)}"]
    if res.get("rc") is not None:
        seen.append(f"rc {res['rc']}")
    for stream in ("module_stdout", "module_stderr"):
        if res.get(stream):
            seen.append(f"{stream} ending {str(res[stream])[-300:]!r}")
    return "the module returned no level (" + "; ".join(seen) + ")"


class Interrupted(Exception):
    """SIGINT or SIGTERM during the sweep (its text: the signal's name), or ansible-playbook gone."""


class SignalLatch:
    """SIGINT and SIGTERM during the sweep: the first raises Interrupted, every later one is ignored.

    Ctrl-C reaches the worker twice within milliseconds: ansible-playbook forwards the SIGINT to its
    workers, then its cleanup terminates the ones still alive with SIGTERM (TaskQueueManager's signal
    handler and _cleanup_processes, ansible/executor/task_queue_manager.py). A second Interrupted raised
    while the first is handled would cut short the writes that mark the results file interrupted and
    leave it "running" (a CI run read that once)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.caught: str | None = None
        self._previous: dict = {}

    def __call__(self, signum, unused_frame):
        if self.caught is None:
            self.trip(signal.Signals(signum).name)

    def trip(self, reason: str):
        """End the sweep for ``reason`` (a signal's name, or ansible-playbook gone); later signals are ignored."""
        self.caught = reason
        raise Interrupted(reason)

    def install(self):
        for sig in self.SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self)
            except ValueError:  # not the main thread: the default handling stays
                pass

    def restore(self):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


# ansible-runner's cancel (AWX's) sends SIGKILL to ansible-playbook's process group
# (ansible_runner/runner.py, Runner.handle_termination: os.killpg(pgroup, signal.SIGKILL)), but the
# task's worker is not in it: ansible-core's WorkerProcess._detach (ansible/executor/process/worker.py)
# calls os.setsid(). Left alone, the worker would measure the mode's remaining levels after the cancel
# and file them as complete; it notices its parent gone instead (os.getppid() changes) and stops.
PLAYBOOK_GONE = "SIGKILL of ansible-playbook (an AWX cancel or a kill: the playbook is gone)"


def _resumable(results_file: str, mode: str) -> dict | None:
    """The results file of an interrupted attempt of this launch (its levels kept on resume), else None."""
    try:
        with open(results_file, encoding="utf-8") as handle:
            prior = json.load(handle)
    except (OSError, ValueError):
        return None
    if (not isinstance(prior, dict) or prior.get("mode") != mode or prior.get("status") not in ("running", "interrupted")
            or not isinstance(prior.get("levels"), list)):
        return None
    prior["levels"] = [lv for lv in prior["levels"] if isinstance(lv, dict) and not lv.get("error")]
    return prior


def _whole(value) -> int | None:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(SETTINGS + OWN)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        self._playbook_pid = os.getppid()  # the worker's parent: ansible-playbook
        task_vars = task_vars or {}
        args = dict(self._task.args)
        raw = {k: args[k] for k in SETTINGS if k in args}
        validate_only = bool(args.get("validate_only", False))
        host = task_vars.get("inventory_hostname", "localhost")
        try:
            if raw.get("prompts_file"):
                raw["prompts"] = load_prompts(raw["prompts_file"], role_label("prompts_file"),
                                              str(raw.get("prompts_format") or "auto").strip().lower())
            settings = normalize_settings(raw, label=role_label, check_prompts_file=False)
            mode = check_mode_name(args.get("mode"))
            match = check_output_match(args.get("output_match_prompts", 0), args.get("output_match_tokens", 32))
            try:
                interval = live.check_interval(args.get("progress_interval_s", live.INTERVAL_DEFAULT_S))
            except live.ProgressError as exc:
                raise SettingsError(str(exc)) from exc
            if args.get("results_file") or not validate_only:
                results_file = check_results_file(args.get("results_file"))
            if not validate_only and not self._task.check_mode and not settings["base_url"]:
                raise SettingsError("base_url is not set: give the server's address, e.g. http://127.0.0.1:30000 "
                                    "(engine=external), or launch the server first (it sets specbench_server)")
        except SettingsError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        public = public_settings(settings)
        if validate_only:
            result.update(changed=False, settings=public,
                          msg=f"sweep settings are valid: levels {settings['concurrency']}, {settings['api']} API, "
                              f"{settings['input_len']} in / {settings['output_len']} out tokens")
            return result
        if self._task.check_mode:
            plan = describe_plan(settings) + f"; results would go to {results_file}"
            self._display.display(f"{host} | bench_sweep {mode} (check mode, nothing sent): {plan}")
            result.update(changed=False, settings=public, levels=[], results_file=results_file, msg=plan)
            return result
        return self._sweep(result, task_vars, args, settings, mode, results_file, host, match, interval)

    # -- the sweep ----------------------------------------------------------------------------
    def _module_args(self, settings: dict, **extra) -> dict:
        margs = {k: v for k, v in settings.items() if k in DEFAULTS and k != "prompts"}
        if settings.get("prompts"):
            margs["prompts"] = settings["prompts"]
        margs.update(extra)
        return margs

    def _call(self, task_vars: dict, margs: dict) -> dict:
        res = self._execute_module(module_name=MODULE, module_args=margs, task_vars=task_vars)
        res.pop("invocation", None)
        return res

    def _output_match(self, probe, match, host, mode) -> dict:
        """The fixed greedy prompts the probe sent, before the first warmup (outside every window)."""
        count, tokens = match
        block = probe.get("output_match")
        if not isinstance(block, dict):
            why = probe.get("msg") or "the module returned no outputs"
            self._display.warning(f"{host}: output match of {mode} not recorded: {why}")
            return {"prompts": count, "max_tokens": tokens, "outputs": [], "error": why}
        ok = sum(1 for o in block.get("outputs") or [] if not o.get("error"))
        self._display.display(f"{host} | bench_sweep {mode}: output match, {ok}/{count} prompts answered at C=1, "
                              f"temperature 0, {tokens} tokens ({block.get('source')} kept)")
        return block

    def _node_progress(self, path: str) -> dict | None:
        """The client workers' tallies read from the node (None when unreadable: the line says so)."""
        try:
            res = self._low_level_execute_command(f"cat {shlex.quote(path)}.w* 2>/dev/null")
        except Exception:  # noqa: BLE001 - a progress read never fails the level
            return None
        return live.worker_totals(res.get("stdout") or "")

    def _check_playbook(self):
        """End the sweep (the level in flight not kept) when ansible-playbook, the worker's parent, is gone."""
        if os.getppid() != getattr(self, "_playbook_pid", os.getppid()):
            self._latch.trip(PLAYBOOK_GONE)

    def _measure_live(self, task_vars, margs, tick):
        """Run one level's module call in a thread; every ``tick.interval`` seconds while it runs,
        read the workers' tallies from the node and hand them to ``tick``."""
        box = {}

        def call():
            try:
                box["res"] = self._call(task_vars, margs)
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                box["exc"] = exc

        worker = threading.Thread(target=call, name="bench_sweep-level", daemon=True)
        started = time.monotonic()
        next_tick = started + tick.interval
        worker.start()
        while True:
            worker.join(min(1.0, max(0.0, next_tick - time.monotonic())))
            if not worker.is_alive():
                break
            self._check_playbook()
            if time.monotonic() >= next_tick:
                next_tick += tick.interval
                tick(self._node_progress(margs["progress_path"]), time.monotonic() - started)
        # A level that ended after the playbook died is not kept either: the node lock's keeper stops the server
        # once the run is gone (module_utils/launch/orphans.py), so its last requests may have met no server.
        self._check_playbook()
        if "exc" in box:
            raise box["exc"]
        return box["res"]

    def _sweep(self, result, task_vars, args, settings, mode, results_file, host, match, interval):
        secrets = [settings["api_key"]]
        engine = args.get("engine") or "external"
        server_fact = args.get("server") or {}
        if not isinstance(server_fact, dict):
            server_fact = {}
        public = public_settings(settings)
        run_dir = os.path.dirname(os.path.dirname(os.path.abspath(results_file)))
        # progress.jsonl: the run's folder, or the one the playbook gives (serve.yml: the host's serve folder).
        progress_dir = args.get("progress_dir") or run_dir
        attempt = live.current_attempt(run_dir)
        full_levels = list(settings["concurrency"])
        # A resumed run (resume=true): the levels this launch's file already holds are kept, with their attempt,
        # and only the missing ones are measured.
        prior = _resumable(results_file, mode) if args.get("resume") and settings.get("categories") != "separate" else None
        kept = []
        if prior is not None:
            for level in prior["levels"]:
                kept.append(dict(level, attempt=int(level.get("attempt") or prior.get("attempt") or 1)))
            done = {level.get("concurrency") for level in kept}
            settings = dict(settings, concurrency=[c for c in full_levels if c not in done])
            if prior.get("output_match"):
                match = (0, match[1])  # sent once, in the first attempt: kept
        doc = {
            "schema": RESULTS_SCHEMA,
            "run_id": args.get("run_id"),
            "host": host,
            "mode": mode,
            "engine": engine,
            "status": "running",
            "started_at": now_iso(),
            "finished_at": None,
            "settings": public,
            "server": redact(dict(server_fact, base_url=settings["base_url"]), secrets),
            "levels": kept,
            "error": None,
        }
        if attempt > 1:
            doc["attempt"] = attempt
        if prior is not None:
            doc["attempts"] = (prior.get("attempts") or [{"attempt": int(prior.get("attempt") or 1),
                                                          "started_at": prior.get("started_at"),
                                                          "status": prior.get("status")}]) + [
                {"attempt": attempt, "started_at": doc["started_at"], "resumed_levels": settings["concurrency"]}]
            if prior.get("output_match"):
                doc["output_match"] = prior["output_match"]

        def save():
            try:
                write_json_atomic(results_file, redact(doc, secrets))
            except OSError as exc:
                raise SettingsError(f"cannot write the results file {results_file}: {exc}") from exc

        def finish(status: str, error: str | None):
            # A resumed file's levels in the sweep's order, whichever attempt measured each.
            doc["levels"].sort(key=lambda lv: full_levels.index(lv.get("concurrency"))
                               if lv.get("concurrency") in full_levels else len(full_levels))
            doc["status"] = status
            doc["error"] = error
            doc["finished_at"] = now_iso()
            save()

        latch = self._latch = SignalLatch()
        latch.install()
        try:
            return self._sweep_run(result, task_vars, args, settings, mode, results_file, host, match, interval, doc,
                                   save, finish, secrets, server_fact, engine, progress_dir, attempt, full_levels)
        except Interrupted as exc:
            # Ctrl-C (SIGINT) or a SIGTERM (a kill, a stop): what was measured stays on disk, the file and the run
            # marked incomplete, with how to resume it; a second signal does not cut these writes short (the latch).
            finish("interrupted", f"interrupted by {exc} after {len(doc['levels'])} of {len(full_levels)} levels")
            message = live.mark_incomplete(run_dir, f"{exc} during {mode} on {host}")
            try:
                live.append_record(progress_dir, {
                    "event": "interrupted", "host": host, "mode": mode, "signal": str(exc),
                    "levels_on_disk": [lv.get("concurrency") for lv in doc["levels"]], "line": message,
                    "time": now_iso()})
            except OSError:
                pass
            self._display.warning(f"{host}: {message}")
            result.update(failed=True, interrupted=True, msg=message, results_file=results_file)
            return result
        finally:
            latch.restore()

    def _sweep_run(self, result, task_vars, args, settings, mode, results_file, host, match, interval, doc, save,
                   finish, secrets, server_fact, engine, progress_dir, attempt, full_levels):
        try:
            save()
            # The probe also sends the output match's prompts (one module call, before the first warmup).
            probe = self._call(task_vars, self._module_args(settings, probe=True, concurrency=[1],
                                                            output_match=match[0], output_match_tokens=match[1]))
            self._check_playbook()  # killed meanwhile: the probe may have met a server already stopped
            if probe.get("failed"):
                error = f"cannot benchmark the server: {probe.get('msg')}"
                finish("failed", error)
                self._display.warning(f"{host}: {error}")
                result.update(failed=True, msg=f"{error} (recorded in {results_file})", results_file=results_file)
                return result
            server = probe.get("server") or {}
            doc["server"] = redact(dict(server_fact, **server), secrets)
            settings = dict(settings, model=server.get("model") or settings["model"])
            doc["settings"] = dict(public_settings(settings), concurrency=full_levels)
            spec = server.get("speculation") or {}
            running = describe_running(spec) if spec.get("algorithm") != "unknown" else None
            if engine == "external":
                # A server specbench did not launch: the mode is only a name; hold it against what the
                # server says it runs before measuring (a launched server had its post-launch check).
                check = check_mode_against_server(mode, dict(server, base_url=settings["base_url"]))
                doc["mode_check"] = check
                if not check["ok"]:
                    error = f"cannot benchmark the server as mode {mode}: {check['message']}"
                    finish("failed", error)
                    result.update(failed=True, msg=f"{error} (recorded in {results_file})", results_file=results_file,
                                  mode_check=check)
                    return result
                if check["message"]:
                    self._display.warning(f"{host}: {check['message']}")
            self._display.display(
                f"{host} | bench_sweep {mode}: levels {settings['concurrency']} against {settings['base_url']} "
                f"(model {server.get('model')}, {settings['api']} API"
                + (f", server runs {running}" if running else "") + f"); results in {results_file}")
            if match[0]:
                doc["output_match"] = self._output_match(probe, match, host, mode)
                save()

            launch = _whole(args.get("launch"))
            launches = _whole(args.get("launches"))
            run_started = _number(args.get("run_started"))
            remaining = live.remaining_after(args.get("plan"), launch) if launches else 0.0
            per_level = live.level_seconds(settings)
            levels_total = len(settings["concurrency"]) * len(category_settings(settings))
            position = {"index": 0, "seen": []}

            def record(rec):
                try:
                    live.append_record(progress_dir, rec)
                except OSError as exc:
                    self._display.warning(f"{host}: cannot append to {progress_dir}/{live.PROGRESS_FILE}: {exc}")

            def measure(concurrency, run_settings):  # one level, measured by the module on the node
                # (measured once there: the loop here measures a saturated level again, as the same level)
                key = (id(run_settings), concurrency)  # one run_settings per category (sweep.category_settings)
                if key not in position["seen"]:
                    position["seen"].append(key)
                position["index"] = min(len(position["seen"]), levels_total)

                def tick(totals, elapsed):
                    phase = "window" if totals and totals["window"] else "warm-up"
                    if totals and totals.get("drain_left_s") is not None:
                        phase = "draining"  # the window over, its requests in flight finishing
                    rec = live.progress_record(host, mode, launch, launches, position["index"], levels_total,
                                               concurrency, phase, totals, elapsed, per_level, run_started,
                                               remaining, time.time(), window_s=settings["window_s"])
                    record(rec)
                    self._display.display(rec["line"])

                tick.interval = interval
                path = f"/tmp/specbench-progress-{uuid.uuid4().hex}"
                res = self._measure_live(task_vars, self._module_args(run_settings, concurrency=[concurrency],
                                                                      saturated_retries=0, progress_path=path), tick)
                levels = res.get("levels") or []
                if levels:
                    return levels[0]
                return unmeasured_level(concurrency, f"C={concurrency}: {no_level_reason(res)}")

            def on_level(level):
                if attempt > 1:
                    level["attempt"] = attempt
                doc["levels"].append(redact(level, secrets))
                save()
                line = f"{host} | {format_level_line(level, server=doc['server'])}"
                self._display.display(line)
                now = time.time()
                record({"event": "level_done", "host": host, "mode": mode, "launch": launch, "launches": launches,
                        "level": position["index"], "levels": levels_total, "concurrency": level.get("concurrency"),
                        "error": level.get("error"), "line": line,
                        "run_elapsed_s": round(now - run_started, 1) if run_started else None,
                        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "unix_s": round(now, 3)})
                if level.get("error"):
                    self._display.warning(f"{host}: {level['error']}")

            sweep(settings, server, on_level=on_level, measure=measure)
            status, error = sweep_outcome(doc["levels"], settings["stop_on_error"])
            finish(status, error)
            stopped = error if status == "stopped" else None
        except SettingsError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        facts = {
            "mode": mode,
            "engine": engine,
            "run_id": doc["run_id"],
            "results_file": results_file,
            "status": doc["status"],
            "error": doc["error"],
            "settings": doc["settings"],
            "server": {k: doc["server"].get(k)
                       for k in ("base_url", "model", "version", "speculative_algorithm", "speculation")},
            "levels": doc["levels"],
        }
        result.update(changed=True, results_file=results_file, levels=doc["levels"], status=doc["status"],
                      ansible_facts={"specbench_sweep": facts})
        if stopped:
            result.update(failed=True, msg=f"{stopped} (sweep stopped; the levels measured before it are in "
                                           f"{results_file})")
        else:
            result["msg"] = f"{len(doc['levels'])} levels measured; results in {results_file}"
        return result

# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What playbooks/serve.yml may serve, and when a running configuration is up to date.

serve.yml closes the loop from a run to a running server; these rules keep it to what the run
measured and keep a failed proof failed:

- ``incomplete_problems``: a run that is not complete (a failed level, a mode that never
  finished) is refused: its evidence has holes the plan would be built over.
- ``identity_differences``: the command about to be launched against the command the run
  measured for the same configuration: model, draft model, speculative algorithm, steps, top-k,
  draft tokens (SGLang), and ``--model`` and ``--speculative-config`` less the schedule (vLLM).
  Capacity settings have their own check (``serve_plan.fairness``).
- ``run_time_scale``: the emulator's time scale the run measured at (the served emulator runs at
  the same one, never one chosen from the user's levels).
- ``proof_workload``: the run's workload, key by key, for the proof sweep (role bench_sweep's
  ``bench_<key>`` variables): prompt set, lengths mode, categories, warmup, window and the rest.
- ``up_to_date``: serve.json says this run's configuration was served, proved, and under the same
  ``serve_on_regression``; only then does a healthy server running the same command count as
  "nothing to do". A failed or unclear proof is proved again.
- ``rollback_plan``: rollback is to a configuration, not a name: the run's best static mode with
  no schedule and no table. It is a target whenever it differs from the configuration served
  (vLLM's n-gram with a schedule rolls back to static n-gram).
- ``retire``: serve.json of a configuration that no longer runs (absent, replaced by another run)
  keeps its proof but says it is no longer served, by whom and when.
"""

from __future__ import annotations

import json
import os
import time

from .common import BASELINE

# The workload keys the proof sweep repeats from the run (results' ``settings``, the client's
# public settings; role bench_sweep's bench_<key>). Concurrency comes from the run's levels.
WORKLOAD_KEYS = ("api", "model", "input_len", "output_len", "warmup_s", "window_s", "target_rel_ci", "window_max_s",
                 "window_min_requests", "requests", "repeats", "batches", "seed", "prompts_file", "prompts_format",
                 "lengths", "categories", "request_timeout_s", "saturated_retries")

# SGLang (and the emulator, started with SGLang's flags): the flags that say what is served.
# Upstream: sglang/srt/server_args.py (ServerArgs.add_cli_args).
SGLANG_IDENTITY = ("--model-path", "--speculative-algorithm", "--speculative-draft-model-path",
                   "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                   "--dtype", "--quantization", "--kv-cache-dtype")
# vLLM: the model and the speculative config (vllm/config/speculative.py, SpeculativeConfig), less
# the per-batch-size schedule serve.yml adds itself.
VLLM_IDENTITY = ("--model", "--dtype", "--quantization", "--kv-cache-dtype")
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
# An adaptive configuration's steps and draft tokens are the table's, per batch size (the run's own
# table, built from the static mode's levels): only the rest of its identity is held to the static run.
ADAPTIVE_VARIES = ("--speculative-num-steps", "--speculative-num-draft-tokens")

SERVED, RETIRED = "served", "retired"


def _flag_values(argv: list | None, flags: tuple[str, ...]) -> dict:
    """``{flag: value}`` for each of ``flags`` in ``argv`` (``--flag value`` or ``--flag=value``)."""
    out: dict = {}
    items = [str(a) for a in argv or []]
    for i, item in enumerate(items):
        name, eq, value = item.partition("=")
        if name in flags:
            if eq:
                out[name] = value
            elif i + 1 < len(items) and not items[i + 1].startswith("--"):
                out[name] = items[i + 1]
            else:
                out[name] = True
    return out


def _vllm_spec(argv: list | None) -> dict | None:
    raw = _flag_values(argv, ("--speculative-config",)).get("--speculative-config")
    if raw is None:
        return None
    try:
        spec = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {"unparsed": raw}
    if not isinstance(spec, dict):
        return {"unparsed": raw}
    return {k: v for k, v in spec.items() if k != SCHEDULE_KEY}


def identity(argv: list | None, engine: str) -> dict:
    """What a launch command serves, by the flags that say so (module docstring)."""
    if engine == "vllm":
        out = {k: str(v) for k, v in _flag_values(argv, VLLM_IDENTITY).items()}
        out["--speculative-config"] = json.dumps(_vllm_spec(argv), sort_keys=True)
        return out
    return {k: str(v) for k, v in _flag_values(argv, SGLANG_IDENTITY).items()}


def measured_mode(plan_mode: str, results: dict) -> str:
    """The run's mode whose command the plan's launch repeats: the mode itself where the run measured
    it, else its static counterpart (``eagle3-adaptive`` -> ``eagle3``)."""
    if plan_mode in results:
        return plan_mode
    return plan_mode[: -len("-adaptive")] if plan_mode.endswith("-adaptive") else plan_mode


def _resolved(result: dict, engine: str) -> dict:
    """What the run's server said it ran (SGLang's /server_info, resolved arguments), by flag: fills in
    what the measured command left to the server's own choice (SGLang picks steps, top-k and draft
    tokens itself when they are not given: sglang/srt/server_args.py, _handle_speculative_decoding)."""
    if engine == "vllm":
        return {}
    info = ((result or {}).get("server") or {}).get("server_info") or {}
    out = {}
    for flag in SGLANG_IDENTITY:
        value = info.get(flag.lstrip("-").replace("-", "_")) if isinstance(info, dict) else None
        if value is not None:
            out[flag] = str(value)
    return out


# The speculative algorithms SGLang's adaptive speculation runs (NEXTN is SGLang's alias of EAGLE), and
# only at top-k 1: sglang/srt/speculative/adaptive_spec_params.py, adaptive_unsupported_reason.
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")


def adaptive_refusal(mode: str, result: dict | None) -> str | None:
    """Why an adaptive table built from ``mode``'s measurement would not serve what the run measured, or
    None where it would (or where the run does not say: serve.yml's identity check still holds the
    launch to the measured command). SGLang's adaptive speculation runs EAGLE, EAGLE-3 (and NEXTN) at
    top-k 1 only: a table built from a mode measured at another top-k, or from another algorithm,
    would serve a configuration the run never measured. vLLM serves a per-batch-size schedule of the
    mode as measured (``vllm_schedule``): never refused here."""
    result = result or {}
    engine = str(result.get("engine") or "")
    command = (result.get("server") or {}).get("command")
    if engine == "vllm" or not command or mode.endswith("-adaptive"):
        return None
    given, resolved = identity(command, engine), _resolved(result, engine)
    algo = str(resolved.get("--speculative-algorithm") or given.get("--speculative-algorithm") or "").upper()
    if algo and algo not in ADAPTIVE_ALGORITHMS:
        return (f"SGLang's adaptive speculation runs EAGLE and EAGLE-3 only, and {mode} is {algo}: an adaptive "
                f"table would serve a configuration this run did not measure")
    topk = given.get("--speculative-eagle-topk") or resolved.get("--speculative-eagle-topk")
    if algo and topk is not None and str(topk) != "1":
        how = "" if "--speculative-eagle-topk" in given else " (resolved by the server)"
        return (f"SGLang's adaptive speculation runs top-k 1 only, and {mode} was measured at top-k {topk}{how}: an "
                "adaptive table built from it would serve a configuration this run did not measure")
    return None


def identity_differences(launched_argv: list, results: dict, plan_mode: str, engine: str) -> list[str]:
    """Each identity flag of the command about to be launched that differs from the run's command for
    the same configuration ('<flag> is X now, Y when the run measured <mode>'). A flag the launch sets
    is held to the measured command's value, else to what the run's server resolved it to; a flag the
    measured command set is required of the launch. Empty when they agree, or when the run recorded no
    command for that mode (nothing to hold it to)."""
    mode = measured_mode(plan_mode, results)
    result = results.get(mode) or {}
    measured = (result.get("server") or {}).get("command")
    if not measured:
        return []
    now, then = identity(launched_argv, engine), identity(measured, engine)
    resolved = _resolved(result, engine)
    skip = ADAPTIVE_VARIES if plan_mode.endswith("-adaptive") and mode != plan_mode else ()
    problems = []
    for flag in sorted((set(now) | set(then)) - set(skip)):
        if flag in now and flag not in then:
            if flag not in resolved or resolved[flag] == now[flag]:
                continue  # left to the server in the run: it resolved to the same value, or said nothing
            was = f"{resolved[flag]} (resolved by the server)"
        elif flag in now:
            if now[flag] == then[flag]:
                continue
            was = then[flag]
        else:
            was = then[flag]
        problems.append(f"{flag} is {now.get(flag, '(not set)')} now, {was} when the run measured {mode}")
    return problems


def version_difference(now: str, results: dict, plan_mode: str, engine: str) -> str:
    """Why the engine version on the node now is not the one the run measured ``plan_mode`` on (the
    configuration it measured: ``measured_mode``), or '' when they agree or the run recorded none. The
    versions are compared as recorded (the emulator's carries its mark: 0.5.23+specbench-emulator)."""
    mode = measured_mode(plan_mode, results)
    then = str(((results.get(mode) or {}).get("server") or {}).get("version") or "")
    if not then or then == "unknown" or not now or str(now) == then:
        return ""
    name = {"vllm": "vLLM", "emulator": "the emulator"}.get(engine, "SGLang")
    return (f"{name} is {now} on this node now, {then} when the run measured {mode}. A new version can change what "
            f"speculation pays: measure it again with compare.yml on {now} and serve that run, or install {then}")


def run_time_scale(results: dict) -> float | None:
    """The emulator time scale the run's servers ran at (``--emulator-time-scale`` of their commands),
    None where none was given (a real engine, or the emulator's default)."""
    scales = set()
    for result in results.values():
        value = _flag_values(((result or {}).get("server") or {}).get("command"), ("--emulator-time-scale",))
        if "--emulator-time-scale" in value:
            try:
                scales.add(float(value["--emulator-time-scale"]))
            except (TypeError, ValueError):
                continue
    return max(scales) if scales else None


def proof_workload(results: dict, baseline: str = BASELINE) -> dict:
    """The run's workload settings (``WORKLOAD_KEYS``) from the baseline's results file (else any
    mode's): the proof sweep repeats them exactly. A key the run did not record is left out (the
    sweep's default)."""
    base = results.get(baseline) or next(iter(results.values()), {})
    settings = (base or {}).get("settings") or {}
    out = {k: settings[k] for k in WORKLOAD_KEYS if k in settings and settings[k] is not None}
    if settings.get("prompts_source") == "synthesized":
        out["prompts_file"] = ""
    return out


def incomplete_problems(summary: dict) -> list[str]:
    """Why the run is not one to serve from: not complete (its incomplete_reasons), or no mode
    measured. Empty when it is."""
    if summary.get("complete") is False or summary.get("status") in ("incomplete", "failed"):
        return list(summary.get("incomplete_reasons") or ["the run is marked incomplete"])
    if not summary.get("modes_measured", summary.get("modes")):
        return ["no mode was measured"]
    return []


def same_configuration(a: dict | None, b: dict | None) -> bool:
    """Two plans launch the same configuration: same mode, schedule and adaptive table."""
    if not a or not b:
        return False
    return all((a.get(k) or None) == (b.get(k) or None) for k in ("mode", "schedule", "adaptive_config"))


def rollback_plan(static_mode: str | None, plan: dict) -> dict | None:
    """The configuration to roll back to: ``static_mode`` (the run's best static mode) as is, no
    schedule, no table; None when there is none or it is the configuration served."""
    if not static_mode:
        return None
    target = {"mode": static_mode, "engine": plan.get("engine"), "schedule": None, "adaptive_config": None,
              "text": f"{static_mode} as measured (static: no schedule, no adaptive table), rolled back to"}
    return None if same_configuration(target, plan) else target


def running_plan(current: dict) -> dict:
    """The configuration serve.json says runs: the rollback's where it rolled back, else the plan."""
    return (current or {}).get("plan") or {}


def up_to_date(current: dict | None, run_id: str, plan: dict, on_regression: str) -> tuple[bool, str]:
    """(up to date, why not). Up to date only when serve.json is this run's, still served, its
    configuration is the plan or the plan's rollback, its proof verified, and it was proved under the
    same serve_on_regression. The caller also checks that the recorded server runs that command."""
    if not current:
        return False, "this run was never served here"
    if current.get("run_id") != run_id:
        return False, f"serve.json is run {current.get('run_id')}'s"
    if current.get("state", SERVED) != SERVED:
        return False, f"serve.json says {current.get('state')}: {current.get('retired_why') or 'no longer served'}"
    attempt = current.get("rolled_back_from") or {}
    if not (same_configuration(current.get("plan"), plan) or same_configuration(attempt.get("plan"), plan)):
        return False, "the plan differs from the configuration serve.json records"
    if current.get("on_regression") != on_regression:
        return False, (f"it was proved under serve_on_regression={current.get('on_regression')}, "
                       f"now {on_regression}")
    if not current.get("verified"):
        return False, f"its proof did not verify ({current.get('text') or 'no proof'}): proved again"
    return True, ""


REPROVE = ("in_place", "relaunch")


def proves_in_place(current: dict | None, run_id: str, plan: dict, reprove_unclear: str = "in_place") -> bool:
    """serve.json is this run's, still served, and its configuration is the plan itself (not a rollback
    from it): a healthy server running serve.json's command is that configuration, so a proof that did
    not verify (or one under another serve_on_regression) is taken again on it, with nothing relaunched.
    ``reprove_unclear`` ``relaunch`` (serve_reprove_unclear): a proof that was only unclear (``unclear_only``)
    is relaunched instead - looks in place share their server's launch effect, so only a launch of its own adds
    evidence where the launch part is what left the proof unclear."""
    if reprove_unclear not in REPROVE:
        raise ValueError(f"serve_reprove_unclear={reprove_unclear!r}: use one of {', '.join(REPROVE)}")
    if reprove_unclear == "relaunch" and unclear_only(current):
        return False
    return bool(current) and current.get("run_id") == run_id and current.get("state", SERVED) == SERVED \
        and not current.get("rolled_back_from") and same_configuration(current.get("plan"), plan)


def unclear_only(current: dict | None) -> bool:
    """serve.json's proof did not verify only because some level was unclear: no level clearly slower, none where
    the node changed or the looks disagree, the schedule honoured."""
    return bool(current) and not current.get("verified") and bool(current.get("unclear")) \
        and not current.get("worse") and not current.get("ignored_schedule") and not current.get("node_changed") \
        and not current.get("looks_disagree")


def retire(current: dict, why: str) -> dict:
    """serve.json of a configuration that no longer runs: its proof kept, ``state: retired``."""
    out = dict(current)
    out["state"] = RETIRED
    out["retired_why"] = why
    out["retired_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return out


def _write_json_atomic(path: str, doc: dict) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def retire_others(results_dir: str, host: str, base_url: str | None, keep_run_id: str | None, why: str,
                  write: bool = True) -> list[str]:
    """Retire every other run's serve.json on ``host`` that still says it is served at ``base_url``
    (every one on the host when ``base_url`` is None): one port, one current claim. Returns the run
    ids retired (``write`` False: the ones that would be)."""
    retired = []
    try:
        runs = sorted(os.listdir(results_dir))
    except OSError:
        return retired
    for run in runs:
        if run == keep_run_id:
            continue
        path = os.path.join(results_dir, run, host, "serve.json")
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("state", SERVED) != SERVED:
            continue
        if base_url is not None and str(doc.get("base_url") or "").rstrip("/") != str(base_url).rstrip("/"):
            continue
        if write:
            _write_json_atomic(path, retire(doc, why))
        retired.append(run)
    return retired

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Render one SGLang launch command from the role's data, refusing unfair comparisons.

Standard library only: it runs inside the sglang_command module on the managed node, and the
tests import it directly. Flag rendering, the capacity settings' checks, the extra-argument
fairness refusal and the base URL are the shared ones (engines/common.py).

The inputs are data from the sglang_server role (roles/sglang_server/vars/main.yml):

* ``modes``: ``{name: {"flags": {"--flag": value, ...}, "required": {"--flag": "variable"}}}``
  where a value of ``True`` renders the bare flag, ``None``/``False``/``""`` leaves it out, and
  a list renders the flag followed by every item.
* ``settings``: the capacity settings every mode shares (fairness), each
  ``{"name", "flag", "aliases", "variable", "kind", "value", "why"}``; ``kind`` is
  ``fraction`` (0 < x < 1), ``count`` (an integer >= 1) or ``count_or_off`` (>= 1, or -1).

Every problem is a :class:`CommandError` whose text names the setting or flag and the fix.
"""
from __future__ import annotations

import os

from ansible_collections.specbench.core.plugins.module_utils.engines.common import (
    CommandError,
    capacity_setting_of,
    check_extra,
    check_number,
    flag_name,
    flags_in,
    render_value,
)

SGLANG_ENTRY = ("-m", "sglang.launch_server")
ENGINES = ("emulator", "sglang")
# Flags the role renders itself from dedicated variables; extra args must not repeat them.
BASE_FLAGS = {
    "--model-path": "sglang_server_model_path",
    "--model": "sglang_server_model_path",
    "--served-model-name": "sglang_server_served_model_name",
    "--host": "sglang_server_host",
    "--port": "sglang_server_port",
}


def _speculative_only_in_modes(flag: str, source: str) -> None:
    """SGLang's hook in the shared extra-argument check: speculative flags belong to a mode."""
    if flag.startswith("--speculative"):
        raise CommandError(
            f"{source} sets {flag}, a speculative-decoding flag, for every mode (baseline included). "
            "Speculative flags belong to a mode: put it in sglang_server_mode_extra_args under the mode's "
            "name, or define a mode in sglang_server_extra_modes."
        )


def _check_extra(args, source: str, settings: list[dict], mode: str, allow_speculative: bool) -> None:
    """Refuse extra arguments that set a capacity setting or a flag the role renders."""
    def capacity_fix(setting: dict) -> str:
        return (f". Set {setting['variable']} for all modes, or override it for one mode by name with "
                f"sglang_server_mode_overrides: {{'{mode}': {{'{setting['name']}': VALUE}}}} "
                "(recorded in the results as a confounder).")
    check_extra(args, source, settings, BASE_FLAGS, example="['--attention-backend', 'fa3']",
                capacity_fix=capacity_fix, flag_rule=None if allow_speculative else _speculative_only_in_modes)


ADAPTIVE_KNOBS = ("ema_alpha", "update_interval", "warmup_batches", "up_hysteresis", "down_hysteresis",
                  "ceiling_coeff")


# SGLang 0.5.23's DEFAULT_ADAPTIVE_CONFIG rows (batch size -> candidate steps).
DEFAULT_ADAPTIVE_STEPS = {"1": [1, 3, 5, 7], "8": [0, 1, 3], "32": [0, 1], "64": [0]}


def adaptive_candidates(cfg: dict | None) -> list[int]:
    """Every row's candidate steps, sorted (SGLang's resolve_candidate_steps_from_config; its
    default table when ``cfg`` is empty)."""
    rows = {k: v.get("candidate_steps", []) for k, v in (cfg or {}).items() if str(k).isdigit() and isinstance(v, dict)}
    return sorted({int(s) for row in (rows or DEFAULT_ADAPTIVE_STEPS).values() for s in row})


def adaptive_start_steps(cfg: dict | None) -> int:
    """SGLang's own starting --speculative-num-steps when none is given: the middle candidate step
    (_init_adaptive_speculative_params in sglang/srt/arg_groups/speculative_hook.py), 3 for its
    default table, 0 for a table that never speculates."""
    candidates = adaptive_candidates(cfg)
    return candidates[len(candidates) // 2]


def check_adaptive_steps(cfg: dict | None, steps) -> None:
    """SGLang refuses a starting --speculative-num-steps outside the table's candidate steps."""
    candidates = adaptive_candidates(cfg)
    try:
        value = int(steps)
    except (TypeError, ValueError):
        value = None
    if value not in candidates:
        raise CommandError(
            f"sglang_server_adaptive_num_steps is {steps!r}: SGLang needs one of the adaptive table's candidate steps "
            f"{candidates}; leave it unset (null) for SGLang's own pick, the middle one "
            f"({adaptive_start_steps(cfg)} for this table)."
        )


def check_adaptive_config(cfg) -> None:
    """SGLang's --speculative-adaptive-config rules (srt/speculative/adaptive_spec_params.py).

    A JSON object: batch-size keys (digit strings) map to ``{"candidate_steps": [int >= 0, ...]}``
    plus optional per-row knobs; other keys are knobs shared by every row. A batch is routed to
    the row with the largest key not above it (the smallest row below that).
    """
    example = '{"1": {"candidate_steps": [1, 3, 5]}, "32": {"candidate_steps": [0, 1]}, "64": {"candidate_steps": [0]}}'
    if not isinstance(cfg, dict):
        raise CommandError(f"sglang_server_adaptive_config must be a mapping like {example}.")
    rows = 0
    for raw_key, entry in cfg.items():
        key = str(raw_key)
        if not key.isdigit():
            if key not in ADAPTIVE_KNOBS:
                raise CommandError(
                    f"sglang_server_adaptive_config has key {key!r}: keys are batch sizes (\"1\", \"32\", ...) or "
                    f"the shared knobs {', '.join(ADAPTIVE_KNOBS)}."
                )
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if (not isinstance(steps, list) or not steps
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in steps)):
            raise CommandError(
                f"sglang_server_adaptive_config[{key!r}] must be {{\"candidate_steps\": [non-negative integers]}} "
                f"(0 is plain decoding), got {entry!r}; for example {example}."
            )
        rows += 1
    if not rows:
        raise CommandError(f"sglang_server_adaptive_config needs at least one batch-size row, e.g. {example}.")


def emulator_flags(emu: dict) -> list[str]:
    """The emulator's own flags: device folder, profile, time scale, load time, launch variation, faults, extras.

    ``emu`` keys: device_dir, profile, time_scale, load_seconds, launch_sd, launch_seed, faults (list), args
    (list of further ``--emulator-*`` items).
    """
    argv: list[str] = []
    if emu.get("device_dir"):
        argv += ["--emulator-device-dir", os.path.expanduser(str(emu["device_dir"]))]
    if emu.get("profile"):
        argv += ["--emulator-profile", str(emu["profile"])]
    for key, flag in (("time_scale", "--emulator-time-scale"), ("load_seconds", "--emulator-load-seconds")):
        value = emu.get(key)
        if value not in (None, ""):
            try:
                if float(value) < 0 or (key == "time_scale" and float(value) == 0):
                    raise ValueError
            except (TypeError, ValueError):
                raise CommandError(f"sglang_server_emulator_{key} must be a positive number, got {value!r}.") from None
            argv += [flag, str(value)]
    sd, seed = emu.get("launch_sd"), emu.get("launch_seed")
    if sd not in (None, ""):
        try:
            if not 0 <= float(sd) <= 0.5:
                raise ValueError
        except (TypeError, ValueError):
            raise CommandError(f"sglang_server_emulator_launch_sd must be a relative sd from 0 to 0.5 (e.g. 0.02: "
                               f"launches 2% apart), got {sd!r}.") from None
        if float(sd):  # 0 is the emulator's own default: every launch alike
            argv += ["--emulator-launch-sd", str(float(sd))]
    if seed not in (None, "") and sd not in (None, "") and float(sd):
        try:
            argv += ["--emulator-launch-seed", str(int(str(seed)))]
        except ValueError:
            raise CommandError(f"sglang_server_emulator_launch_seed must be a whole number or unset, got {seed!r}.") from None
    faults = emu.get("faults") or []
    if not isinstance(faults, list):
        raise CommandError(f"sglang_server_emulator_faults must be a list (e.g. ['fail-start']), got {faults!r}.")
    for fault in faults:
        argv += ["--emulator-fault", str(fault)]
    extra = [str(a) for a in (emu.get("args") or [])]
    for flag in flags_in(extra):
        if not flag.startswith("--emulator-"):
            raise CommandError(
                f"sglang_server_emulator_args has {flag}: only --emulator-* flags go there; SGLang flags go in "
                "sglang_server_extra_args so that both engines get them."
            )
    return argv + extra


def render(params: dict) -> dict:
    """The launch command and what it records, from the role's data; CommandError when refused.

    ``params`` keys: engine, mode, modes, settings, mode_overrides, extra_args, mode_extra_args,
    enable_metrics (default true: ``--enable-metrics`` rendered whatever extra_args say),
    model_path, served_model_name, host, port, python, emulator_python, emulator_path,
    emulator (see :func:`emulator_flags`) and adaptive_config (see :func:`check_adaptive_config`).
    """
    engine = params.get("engine")
    if engine not in ENGINES:
        raise CommandError(
            f"engine {engine!r} launches nothing here: use engine=emulator or engine=sglang "
            "(engine=external benchmarks a running server and skips this role)."
        )
    modes = params.get("modes") or {}
    mode = params.get("mode")
    if mode in (None, ""):
        raise CommandError(f"mode is not set: pass -e mode=<one of {', '.join(modes)}>.")
    if mode not in modes:
        raise CommandError(f"mode {mode!r} is not a serving mode: valid modes are {', '.join(modes)}.")
    spec = modes[mode] or {}
    if not isinstance(spec, dict) or not isinstance(spec.get("flags", {}) or {}, dict):
        raise CommandError(f"mode {mode} must be a mapping with 'flags' (flag: value), got {spec!r}.")
    settings = params.get("settings") or []
    names = [s["name"] for s in settings]

    # Per-mode overrides: asked for by name, recorded as confounders.
    overrides_all = params.get("mode_overrides") or {}
    if not isinstance(overrides_all, dict):
        raise CommandError("sglang_server_mode_overrides must map a mode to {setting: value}.")
    for name, block in overrides_all.items():
        if name not in modes:
            raise CommandError(
                f"sglang_server_mode_overrides names mode {name!r}, which does not exist: valid modes are "
                f"{', '.join(modes)}."
            )
        if not isinstance(block, dict):
            raise CommandError(f"sglang_server_mode_overrides['{name}'] must map a setting name to a value.")
        for key in block:
            if key not in names:
                raise CommandError(
                    f"sglang_server_mode_overrides['{name}'] overrides {key!r}, which is not a capacity setting: "
                    f"valid names are {', '.join(names)}."
                )
    overrides = overrides_all.get(mode) or {}

    confounders: list[str] = []
    effective: dict = {}
    capacity_argv: list[str] = []
    origins: dict[str, str] = {}
    for setting in settings:
        shared = check_number(setting, setting.get("value"))
        value = shared
        if setting["name"] in overrides:
            variable = f"sglang_server_mode_overrides['{mode}']['{setting['name']}']"
            value = check_number({**setting, "variable": variable}, overrides[setting["name"]])
            if value != shared:
                confounders.append(
                    f"mode {mode} overrides {setting['name']} ({setting['flag']}): {value} instead of the {shared} "
                    "every other mode uses (sglang_server_mode_overrides); this setting differs between the "
                    "compared runs"
                )
        effective[setting["name"]] = value
        capacity_argv += [setting["flag"], str(value)]
        origins[setting["flag"]] = setting["variable"]

    # The mode's own flags: never a capacity setting.
    mode_flags = dict(spec.get("flags") or {})
    if mode_flags.get("--speculative-adaptive"):
        # SGLang's own resolution made explicit (_init_adaptive_speculative_params): unset starting
        # steps are the table's middle candidate, and the draft tokens one more than the steps.
        if mode_flags.get("--speculative-num-steps") in (None, ""):
            mode_flags["--speculative-num-steps"] = adaptive_start_steps(params.get("adaptive_config"))
        if mode_flags.get("--speculative-num-draft-tokens") in (None, ""):
            try:
                mode_flags["--speculative-num-draft-tokens"] = int(mode_flags["--speculative-num-steps"]) + 1
            except (TypeError, ValueError):
                pass  # check_adaptive_steps below names the bad value
    mode_argv: list[str] = []
    for flag, value in mode_flags.items():
        if flag_name(flag) != flag:
            raise CommandError(f"mode {mode} has flag {flag!r}: flags are written --name (without =value).")
        setting = capacity_setting_of(flag, settings)
        if setting:
            raise CommandError(
                f"mode {mode} sets {flag} ({setting['name']}) in its flags: capacity settings are shared by every "
                f"mode. Remove it from the mode and set {setting['variable']}, or override it by name with "
                f"sglang_server_mode_overrides: {{'{mode}': {{'{setting['name']}': VALUE}}}}."
            )
        mode_argv += render_value(flag, value)
        origins[flag] = f"mode {mode}"
    if mode_flags.get("--speculative-adaptive"):
        if params.get("adaptive_config"):
            check_adaptive_config(params["adaptive_config"])
        if mode_flags.get("--speculative-num-steps") not in (None, ""):
            check_adaptive_steps(params.get("adaptive_config"), mode_flags["--speculative-num-steps"])
    for flag, var in (spec.get("required") or {}).items():
        if mode_flags.get(flag) in (None, "", False):
            raise CommandError(f"mode {mode} needs {flag}: set {var}.")

    mode_extra = (params.get("mode_extra_args") or {})
    if not isinstance(mode_extra, dict):
        raise CommandError("sglang_server_mode_extra_args must map a mode to a list of argv items.")
    for name in mode_extra:
        if name not in modes:
            raise CommandError(
                f"sglang_server_mode_extra_args names mode {name!r}, which does not exist: valid modes are "
                f"{', '.join(modes)}."
            )
    own_extra = [str(a) for a in (mode_extra.get(mode) or [])]
    _check_extra(own_extra, f"sglang_server_mode_extra_args['{mode}']", settings, mode, allow_speculative=True)
    if own_extra:
        confounders.append(f"mode {mode} adds its own arguments: {' '.join(own_extra)} (sglang_server_mode_extra_args)")
    for flag in flags_in(own_extra):
        origins[flag] = f"sglang_server_mode_extra_args['{mode}']"
    extra = params.get("extra_args") or []
    _check_extra(extra, "sglang_server_extra_args", settings, mode, allow_speculative=False)
    extra = [str(a) for a in extra]
    for flag in flags_in(extra):
        origins[flag] = "sglang_server_extra_args"
    # /metrics feeds the running/queued figures and the "cap reached" and "queued" confounders:
    # always on, whatever a user puts in sglang_server_extra_args (once, not twice).
    observe: list[str] = []
    if params.get("enable_metrics", True) and "--enable-metrics" not in [*own_extra, *extra]:
        observe = ["--enable-metrics"]
        origins.setdefault("--enable-metrics", "sglang_server_enable_metrics")

    model_path = params.get("model_path")
    if not model_path:
        raise CommandError("sglang_server_model_path is not set: the model to serve (a folder or a hub name).")
    host = params.get("host") or "127.0.0.1"
    port = params.get("port")
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise CommandError(f"sglang_server_port must be a TCP port number, got {port!r}.") from None
    if not 0 < port < 65536:
        raise CommandError(f"sglang_server_port must be between 1 and 65535, got {port}.")
    base_argv = ["--model-path", str(model_path)]
    if params.get("served_model_name"):
        base_argv += ["--served-model-name", str(params["served_model_name"])]
    base_argv += ["--host", str(host), "--port", str(port)]
    for flag, var in (("--model-path", "sglang_server_model_path"), ("--served-model-name",
                      "sglang_server_served_model_name"), ("--host", "sglang_server_host"),
                      ("--port", "sglang_server_port")):
        origins[flag] = var

    emulator_argv: list[str] = []
    if engine == "sglang":
        python = params.get("python") or "python3"
        entry = [str(python), *SGLANG_ENTRY]
    else:
        emulator_path = params.get("emulator_path")
        if not emulator_path:
            raise CommandError("sglang_server_emulator_path is not set: the emulator folder on the node.")
        entry = [str(params.get("emulator_python") or "python3"), os.path.expanduser(str(emulator_path))]
        emulator_argv = emulator_flags(params.get("emulator") or {})
        for flag in flags_in(emulator_argv):
            origins.setdefault(flag, "sglang_server_emulator_args")

    argv = [*base_argv, *capacity_argv, *mode_argv, *observe, *own_extra, *extra, *emulator_argv]
    return {
        "argv": [*entry, *argv],
        "entry": entry,
        "args": argv,
        "mode": mode,
        "engine": engine,
        "host": str(host),
        "port": port,
        "settings": effective,
        "mode_flags": mode_argv,
        "confounders": confounders,
        "origins": origins,
    }

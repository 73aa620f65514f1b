"""vLLM's argument parser and entry module are found wherever the release keeps them (issue 18,
item 6): a fake vLLM package that has only the older layout
(``vllm/entrypoints/openai/cli_args.py``, no ``vllm/entrypoints/launchers/``) is probed by the same
child process the vllm_command module runs. No vLLM is needed; runs in well under a second."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ansible_collections.specbench.core.plugins.module_utils.engines.vllm import flags as vllm_flags

PARSER = '''
import argparse
def make_arg_parser(parser):
    parser.add_argument("--model")
    parser.add_argument("--port", type=int)
    parser.add_argument("--speculative-config")
    return parser
'''
FLEXIBLE = "import argparse\nclass FlexibleArgumentParser(argparse.ArgumentParser):\n    pass\n"


def fake_vllm(root: Path, launchers: bool) -> Path:
    """A package named vllm with the parser in openai/ (old layout) or launchers/ (0.32's)."""
    pkg = root / "vllm"
    where = "launchers" if launchers else "openai"
    for sub in ("", "entrypoints", f"entrypoints/{where}", "utils"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("__version__ = '0.0-fake'\n" if sub == "" else "")
    (pkg / "entrypoints" / where / "cli_args.py").write_text(PARSER)
    (pkg / "entrypoints" / where / "api_server.py").write_text("")
    (pkg / "utils" / "argparse_utils.py").write_text(FLEXIBLE)
    return root


def probe_with(tmp_path: Path, launchers: bool, monkeypatch) -> dict:
    fake_vllm(tmp_path, launchers)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return vllm_flags.probe(sys.executable, ["--model", "m", "--port", "8000"], timeout=60)


def test_old_layout_parser_in_openai_cli_args(tmp_path, monkeypatch):
    info = probe_with(tmp_path, launchers=False, monkeypatch=monkeypatch)
    assert info["parser_module"] == "vllm.entrypoints.openai.cli_args"
    assert info["entry_module"] == "vllm.entrypoints.openai.api_server"
    assert "--speculative-config" in info["options"] and info["parse_error"] is None


def test_new_layout_parser_and_entry_in_launchers(tmp_path, monkeypatch):
    info = probe_with(tmp_path, launchers=True, monkeypatch=monkeypatch)
    assert info["parser_module"] == "vllm.entrypoints.launchers.cli_args"
    assert info["entry_module"] == "vllm.entrypoints.launchers.api_server"
    out = {"argv": ["py", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]}
    argv = ["py", "-m", "vllm.entrypoints.launchers.api_server", "--model", "m"]
    assert vllm_flags.use_entry(out, info)["argv"] == argv


def test_no_parser_anywhere_names_the_cause(tmp_path, monkeypatch):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    try:
        vllm_flags.probe(sys.executable, [], timeout=60)
    except vllm_flags.FlagError as exc:
        assert "cannot build vLLM's argument parser" in str(exc)
        assert "vllm.entrypoints.openai.cli_args" in str(exc)
    else:
        raise AssertionError("a vLLM without make_arg_parser was accepted")


def test_the_parser_is_kept_per_vllm_install_and_read_back_without_importing_vllm(tmp_path, monkeypatch):
    fake_vllm(tmp_path / "pkg", launchers=True)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "pkg") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cache = tmp_path / "cache"
    args = ["--model", "m", "--port", "8000"]
    first = vllm_flags.cached_probe(sys.executable, args, timeout=60, cache_dir=str(cache))
    assert first["cache"] == "stored" and first["parse_error"] is None
    [kept] = cache.glob("vllm-parser-*.json")
    # The second run reads the file: the parser module made unimportable proves vLLM was not imported again.
    (tmp_path / "pkg/vllm/entrypoints/launchers/cli_args.py").write_text("raise SystemExit('imported')\n")
    os.utime(tmp_path / "pkg/vllm/entrypoints/launchers/cli_args.py")
    again = vllm_flags.cached_probe(sys.executable, args, timeout=60, cache_dir=str(cache))
    assert again["cache"] == "hit" and again["options"] == first["options"] and "parse_error" not in again
    # A reinstall (vLLM's __init__.py written again) is another install: probed again, here failing as it must.
    init = tmp_path / "pkg/vllm/__init__.py"
    init.unlink()
    init.write_text("__version__ = '0.0-fake2'\n")
    try:
        vllm_flags.cached_probe(sys.executable, args, timeout=60, cache_dir=str(cache))
    except vllm_flags.FlagError as exc:
        assert "imported" in str(exc)
    else:
        raise AssertionError("a new install must be probed, not read from the cache")
    # A cache file that is not this user's regular file is never read; one that cannot be written is no cache.
    kept.unlink()
    kept.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text('{"options": ["--everything"]}')
    assert vllm_flags.read_own(str(kept)) is None  # the trust rule itself
    (tmp_path / "pkg/vllm/entrypoints/launchers/cli_args.py").write_text(PARSER)
    assert vllm_flags.cached_probe(sys.executable, args, timeout=60, cache_dir=None)["cache"] == "off"

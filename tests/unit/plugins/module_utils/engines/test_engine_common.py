"""The code every engine shares, written once (issue 18, Layout): plugins/module_utils/engines/.

The extra-argument fairness refusal with its engine hook, the parser-probe runner (a real child
interpreter: sys.executable) and the layout itself (one folder per engine, nothing engine-named
left loose in module_utils). No engine is needed; the whole file runs in about a second (the
slowest case starts three child interpreters)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ansible_collections.specbench.core.plugins.module_utils.engines import common
from ansible_collections.specbench.core.plugins.module_utils.engines.sglang import command as sglang_command
from ansible_collections.specbench.core.plugins.module_utils.engines.vllm import command as vllm_command

ENGINES = Path(common.__file__).resolve().parent  # plugins/module_utils/engines, wherever the collection is
SETTINGS = [{"name": "mem_fraction", "flag": "--mem-fraction-static", "variable": "x_mem", "kind": "fraction"}]


def fix(setting: dict) -> str:
    return f": set {setting['variable']}."


def test_check_extra_refuses_capacity_and_base_flags_and_calls_the_hook():
    seen = []
    common.check_extra(["--foo", "1"], "src", SETTINGS, {"--port": "x_port"}, example="['--a']",
                       capacity_fix=fix, flag_rule=lambda flag, source: seen.append((flag, source)))
    assert seen == [("--foo", "src")]
    with pytest.raises(common.CommandError, match=r"sets --mem-frac, the capacity setting mem_fraction .*: set x_mem\."):
        common.check_extra(["--mem-frac", "0.5"], "src", SETTINGS, {}, example="['--a']", capacity_fix=fix)
    with pytest.raises(common.CommandError, match="which the role renders itself: set x_port instead"):
        common.check_extra(["--por=1"], "src", SETTINGS, {"--port": "x_port"}, example="['--a']", capacity_fix=fix)
    with pytest.raises(common.CommandError, match=r"argv items such as \['--a'\]"):
        common.check_extra("--foo", "src", SETTINGS, {}, example="['--a']", capacity_fix=fix)


def test_both_engines_use_the_one_refusal_with_their_own_words():
    with pytest.raises(common.CommandError, match="Speculative flags belong to a mode"):
        sglang_command._check_extra(["--speculative-num-steps", "3"], "e", [], "m", allow_speculative=False)
    sglang_command._check_extra(["--speculative-num-steps", "3"], "e", [], "m", allow_speculative=True)
    with pytest.raises(common.CommandError, match="sglang_server_mode_overrides"):
        sglang_command._check_extra(["--mem-fraction-static", "0.5"], "e", SETTINGS, "m", allow_speculative=True)
    with pytest.raises(common.CommandError, match="set x_mem once, for every mode"):
        vllm_command._check_extra(["--mem-fraction-static", "0.5"], "e", SETTINGS)
    with pytest.raises(common.CommandError, match="set vllm_server_modes"):
        vllm_command._check_extra(["--speculative-config", "{}"], "e", SETTINGS)


def test_run_probe_reads_the_marked_line_and_parses_with_the_shared_harness():
    script = ("import argparse, json, sys\nparser = argparse.ArgumentParser()\nparser.add_argument('--x')\n"
              + common.PARSE_ARGV + "\nprint('noise')\nprint('MARK ' + json.dumps({'error': error}))\nprint('tail')\n")
    assert common.run_probe(sys.executable, script, "MARK ", ["--x", "1"], timeout=60) == {"error": None}
    refused = common.run_probe(sys.executable, script, "MARK ", ["--y"], timeout=60)["error"]
    assert "unrecognized arguments: --y" in refused
    with pytest.raises(common.ProbeError) as err:
        common.run_probe(sys.executable, "import sys; sys.stderr.write('boom'); sys.exit(3)", "MARK ", [], timeout=60)
    assert (err.value.kind, err.value.returncode, err.value.tail) == ("broken", 3, "boom")


def test_run_probe_names_a_missing_interpreter_and_a_timeout():
    with pytest.raises(common.ProbeError) as err:
        common.run_probe(str(ENGINES / "no-such-python"), "pass", "MARK ", [], timeout=60)
    assert err.value.kind == "missing"
    # The child sleeps 60 s; the limit is 0.5 s, so it always times out.
    with pytest.raises(common.ProbeError) as err:
        common.run_probe(sys.executable, "import time; time.sleep(60)", "MARK ", [], timeout=0.5)
    assert err.value.kind == "timeout"


def test_one_folder_per_engine_and_nothing_engine_named_left_loose():
    folders = sorted(p.name for p in ENGINES.iterdir() if p.is_dir() and not p.name.startswith("__"))
    assert folders == ["sglang", "vllm"]
    for name in folders:
        assert {"__init__.py", "command.py", "flags.py", "postlaunch.py"} <= {p.name for p in (ENGINES / name).iterdir()}, name
    named = sorted(str(p.relative_to(ENGINES.parent)) for p in ENGINES.parent.rglob("*.py")
                   if p.name.startswith(tuple(f"{n}_" for n in folders)))
    assert named == [], "engine knowledge belongs in engines/<name>/ (the launch both share is launch/process.py)"

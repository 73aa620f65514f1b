"""The module sglang_command run whole, through its main() and AnsibleModule, as ansible-core's own
module unit tests run modules: the arguments patched in (ansible.module_utils.testing), the result
read from the JSON the module prints before it exits. Its task is the module's documented EXAMPLES,
so the example users copy is held to what the module does."""
from __future__ import annotations

import json

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.specbench.core.plugins.modules import sglang_command

EXAMPLE = yaml.safe_load(sglang_command.EXAMPLES)[0]["specbench.core.sglang_command"]


def run_module(capsys, args: dict) -> tuple[int, dict]:
    """main() with ``args`` as the task's arguments: its exit status and its JSON result."""
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        sglang_command.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def test_the_documented_example_renders_the_eagle3_launch(capsys):
    code, result = run_module(capsys, EXAMPLE)
    assert code == 0 and result["changed"] is False, result
    assert result["entry"] == ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
    assert result["args"] == [
        "--model-path", "/models/Kimi-K2.5-INT4", "--host", "127.0.0.1", "--port", "30000",
        "--mem-fraction-static", "0.88", "--max-running-requests", "256",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/Kimi-K2.5-EAGLE3",
        "--enable-metrics"]
    assert result["argv"] == result["entry"] + result["args"]
    assert result["settings"] == {"mem_fraction_static": 0.88, "max_running_requests": 256}
    assert result["confounders"] == [] and result["base_url"] == "http://127.0.0.1:30000"
    assert result["origins"]["--speculative-algorithm"] == "mode eagle3"


def test_the_same_in_check_mode(capsys):
    plain = run_module(capsys, EXAMPLE)[1]
    code, checked = run_module(capsys, {**EXAMPLE, "_ansible_check_mode": True})
    assert code == 0 and checked["argv"] == plain["argv"] and checked["changed"] is False


def test_a_mode_that_sets_a_capacity_setting_fails_naming_the_setting_and_the_fix(capsys):
    code, result = run_module(capsys, {**EXAMPLE, "mode_extra_args": {"eagle3": ["--mem-fraction-static", "0.5"]}})
    assert code == 1 and result["failed"] is True
    assert "sets --mem-fraction-static, the capacity setting mem_fraction_static" in result["msg"]
    assert "Set sglang_server_mem_fraction_static for all modes" in result["msg"]
    assert "sglang_server_mode_overrides" in result["msg"]


@pytest.mark.parametrize(("change", "message"), [
    ({"mode": None}, "missing required arguments: mode"),
    ({"port": None}, "sglang_server_port must be a TCP port number, got None."),
    ({"mode": "ngram"}, "mode 'ngram' is not a serving mode: valid modes are baseline, eagle3."),
])
def test_bad_arguments_fail_with_a_message(capsys, change, message):
    args = {k: v for k, v in {**EXAMPLE, **change}.items() if v is not None}
    code, result = run_module(capsys, args)
    assert code == 1 and result["failed"] is True and message in result["msg"], result


def test_the_emulators_launch_variation_is_rendered_and_checked(capsys):
    """sglang_server_emulator_launch_sd (issue 36): --emulator-launch-sd with its seed; 0 renders nothing (the
    emulator's own default); a value outside 0-0.5 fails naming the variable and an example."""
    emu = {**EXAMPLE, "engine": "emulator", "emulator_path": "/opt/specbench/sglang_emulator"}
    code, result = run_module(capsys, {**emu, "emulator": {"launch_sd": "0.02", "launch_seed": "7"}})
    assert code == 0, result
    at = result["args"].index("--emulator-launch-sd")
    assert result["args"][at:at + 4] == ["--emulator-launch-sd", "0.02", "--emulator-launch-seed", "7"]
    code, result = run_module(capsys, {**emu, "emulator": {"launch_sd": 0, "launch_seed": None}})
    assert code == 0 and "--emulator-launch-sd" not in result["args"], result
    code, result = run_module(capsys, {**emu, "emulator": {"launch_sd": "0.9"}})
    assert code == 1 and "sglang_server_emulator_launch_sd must be a relative sd from 0 to 0.5" in result["msg"]

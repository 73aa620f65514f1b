"""Every mode's launch command, as role sglang_server renders it, against SGLang 0.5.23's real
argument parser (``ServerArgs.add_cli_args``), built in a separate venv on this CPU machine by
tests/sglang_parser/make_venv.sh (.venv-sglang at the repo root, or $SPECBENCH_SGLANG_VENV).

The role's own version check runs with engine=sglang and that venv's interpreter, and this test
parses each rendered command again itself, so both the role and its output are held to SGLang.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "node"))
sys.path.insert(0, str(ROOT / "collections"))

import specbench_testkit as kit  # noqa: E402
from nodekit import case_outcomes, cases_playbook, localhost_inventory, run_playbook  # noqa: E402

from ansible_collections.specbench.core.plugins.module_utils.engines.sglang import command as sglang_command  # noqa: E402

VENV = Path(os.environ.get("SPECBENCH_SGLANG_VENV") or ROOT / ".venv-sglang")
PYTHON = VENV / "bin" / "python"
MODES = ["baseline", "eagle3", "eagle", "nextn", "ngram", "standalone", "eagle3-adaptive"]

pytestmark = pytest.mark.slow

PARSE = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
out = {}
for name, argv in json.loads(sys.stdin.read()).items():
    try:
        ns = parser.parse_args(argv)
        out[name] = {"ok": True, "args": {k: v for k, v in vars(ns).items() if isinstance(v, (str, int, float, bool))
                                          or v is None}}
    except SystemExit as exc:
        out[name] = {"ok": False, "code": exc.code}
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def sglang_python():
    why = kit.wait_for_venv("sglang", PYTHON)  # waits while .ci/run builds it beside the tests
    if why:
        reason = f"no SGLang venv at {VENV}: run tests/sglang_parser/make_venv.sh (a few minutes, ~2.3 GB): {why}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return str(PYTHON)


def _sglang(python: str, script: str, payload) -> dict:
    proc = subprocess.run([python, "-c", script], input=json.dumps(payload), capture_output=True, text=True,
                          timeout=300, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise AssertionError(f"SGLang's parser did not run: {proc.stderr[-3000:]}")


def test_every_mode_renders_a_command_sglang_0_5_23_parses(tmp_path, sglang_python):
    node = tmp_path / "node"
    (node / "cases").mkdir(parents=True)
    # The role's own check imports SGLang (seconds each): run it for the mode with the most flags
    # and the renamed flag; every mode's command is parsed below in one import.
    cases = {mode: {"vars": {"mode": mode, "sglang_server_check_flags": mode == "eagle3-adaptive"},
                    "tasks_from": "preflight"} for mode in MODES}
    cases["old_graph_flag"] = {"vars": {"mode": "eagle3", "sglang_server_cuda_graph_max_bs_flag": "--cuda-graph-max-bs"},
                               "tasks_from": "preflight"}
    adaptive_table = {"1": {"candidate_steps": [1, 3]}, "32": {"candidate_steps": [0, 1]}}
    cases["adaptive_with_config"] = {"vars": {"mode": "eagle3-adaptive", "sglang_server_check_flags": False,
                                              "sglang_server_adaptive_config": adaptive_table},
                                     "tasks_from": "preflight"}
    inventory = localhost_inventory(
        engine="sglang", sglang_python=sglang_python, specbench_node_dir=str(node), sglang_server_check_node=False,
        sglang_server_model_path="/models/Kimi-K2.5-INT4", sglang_server_draft_model_path="/models/Kimi-K2.5-EAGLE3",
        sglang_server_standalone_draft_model_path="/models/small-draft", sglang_server_port=30000,
        sglang_server_tp_size=8,  # as given (auto would count this machine's GPUs)
    )
    run = run_playbook(tmp_path, cases_playbook(tmp_path / "modes.yml", cases, record="sglang_server_command"),
                       inventory)
    assert run.rc == 0, run.stdout[-4000:]
    out = case_outcomes(node)
    rendered = {}
    checked = [r for dummy, task, r in run.results("runner_on_ok") if "Check every flag" in task and r.get("checked")]
    assert [r["version"] for r in checked] == ["0.5.23"], "the role checked eagle3-adaptive with SGLang's parser"
    for mode in [*MODES, "adaptive_with_config"]:
        assert not out[mode]["failed"], f"{mode}: {out[mode].get('msg')}"
        result = out[mode]["fact"]
        assert result["entry"] == [sglang_python, "-m", "sglang.launch_server"]
        rendered[mode] = result["args"]
    # The role's version check with the real parser: the removed flag is named with its replacement.
    assert out["old_graph_flag"]["failed"]
    assert "--cuda-graph-max-bs is not a flag of SGLang 0.5.23" in out["old_graph_flag"]["msg"]
    assert "renamed to --cuda-graph-max-bs-decode in SGLang 0.5.20" in out["old_graph_flag"]["msg"]
    # Independently: SGLang's parser takes every rendered command, with the values intended.
    parsed = _sglang(sglang_python, PARSE, rendered)
    for mode, result in parsed.items():
        assert result["ok"], f"SGLang 0.5.23 refuses {mode}: {' '.join(rendered[mode])}"
        args = result["args"]
        assert args["mem_fraction_static"] == 0.88 and args["max_running_requests"] == 256, mode
        assert args["tp_size"] == 8 and args["context_length"] == 32768, mode
        assert args["cuda_graph_max_bs_decode"] == 256 and args["chunked_prefill_size"] == 8192, mode
    assert parsed["baseline"]["args"]["speculative_algorithm"] is None
    assert parsed["eagle3"]["args"]["speculative_algorithm"] == "EAGLE3"
    assert parsed["eagle3-adaptive"]["args"]["speculative_adaptive"] is True
    assert parsed["eagle3-adaptive"]["args"]["speculative_eagle_topk"] == 1
    config = parsed["adaptive_with_config"]["args"]["speculative_adaptive_config"]
    assert config == str(node / "state" / "adaptive-config.json")


def test_the_example_proxmox_inventory_renders_every_mode_sglang_0_5_23_parses(tmp_path, sglang_python):
    """inventory/proxmox.example.yml is the seeds' whole node: every mode it compares renders from
    it (role sglang_server's preflight, engine=sglang) and SGLang's own parser takes each command
    with the model, TP 8, the EAGLE-3 draft and its settings, --trust-remote-code, /metrics, and
    every capacity setting the same in every mode."""
    import yaml

    example = yaml.safe_load((ROOT / "inventory" / "proxmox.example.yml").read_text())
    group = example["all"]["children"]["gpu_containers"]
    hostvars = {**group["vars"], **group["hosts"]["pve1-ct129"]}
    modes = hostvars["compare_modes"]
    assert set(modes) >= {"baseline", "eagle3"}
    # Rendered here instead of in container 129: the node's connection and folder, its
    # interpreter (this SGLang venv), and no node preflight (its /models are not on this machine).
    for key in ("ansible_connection", "ansible_host", "ansible_user", "proxmox_vmid"):
        hostvars.pop(key)
    hostvars.update(specbench_node_dir=str(tmp_path / "node"), sglang_python=sglang_python,
                    sglang_server_check_node=False)
    (tmp_path / "node" / "cases").mkdir(parents=True)
    cases = {mode: {"vars": {"mode": mode, "sglang_server_check_flags": mode == "eagle3"}, "tasks_from": "preflight"}
             for mode in modes}
    run = run_playbook(tmp_path, cases_playbook(tmp_path / "modes.yml", cases, record="sglang_server_command"),
                       localhost_inventory(**hostvars))
    assert run.rc == 0, run.stdout[-4000:]
    out = case_outcomes(tmp_path / "node")
    rendered = {}
    for mode in modes:
        assert not out[mode]["failed"], f"{mode}: {out[mode].get('msg')}"
        rendered[mode] = out[mode]["fact"]["args"]
        assert out[mode]["fact"]["confounders"] == [], mode
    parsed = _sglang(sglang_python, PARSE, rendered)
    capacity = ("tp_size", "mem_fraction_static", "max_running_requests", "context_length", "cuda_graph_max_bs_decode",
                "chunked_prefill_size")
    for mode, result in parsed.items():
        assert result["ok"], f"SGLang 0.5.23 refuses {mode}: {' '.join(rendered[mode])}"
        args = result["args"]
        assert args["model_path"] == "/models/Kimi-K2.5-INT4" and args["served_model_name"] == "Kimi-K2.5-INT4"
        assert args["trust_remote_code"] is True and args["enable_metrics"] is True, mode
        assert {k: args[k] for k in capacity} == {"tp_size": 8, "mem_fraction_static": 0.88,
                                                  "max_running_requests": 256, "context_length": 32768,
                                                  "cuda_graph_max_bs_decode": 256, "chunked_prefill_size": 8192}, mode
    eagle3 = parsed["eagle3"]["args"]
    assert eagle3["speculative_algorithm"] == "EAGLE3"
    assert eagle3["speculative_draft_model_path"] == "/models/Kimi-K2.5-EAGLE3"
    assert (eagle3["speculative_num_steps"], eagle3["speculative_eagle_topk"],
            eagle3["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert parsed["baseline"]["args"]["speculative_algorithm"] is None
    if "eagle3-adaptive" in parsed:
        assert parsed["eagle3-adaptive"]["args"]["speculative_adaptive"] is True
        assert parsed["eagle3-adaptive"]["args"]["speculative_draft_model_path"] == "/models/Kimi-K2.5-EAGLE3"
    # Nothing in the example points at the seeds' lab addresses.
    text = (ROOT / "inventory" / "proxmox.example.yml").read_text()
    assert "10.1." not in text


CHECK_ADAPTIVE = r"""
import json, sys, tempfile
from sglang.srt.speculative import adaptive_spec_params as a
out = {"default": {k: v["candidate_steps"] for k, v in a.DEFAULT_ADAPTIVE_CONFIG.items()}, "configs": []}
for cfg in json.loads(sys.stdin.read()):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(cfg, fh)
    try:
        out["configs"].append({"ok": True, "steps": a.resolve_candidate_steps_from_config(fh.name)})
    except (ValueError, AttributeError, TypeError) as exc:
        out["configs"].append({"ok": False, "error": str(exc)})
print("RESULT " + json.dumps(out))
"""


def test_adaptive_config_rules_match_sglang(sglang_python):
    configs = [
        {"1": {"candidate_steps": [1, 3, 5]}, "64": {"candidate_steps": [0]}},
        {"ema_alpha": 0.3, "1": {"candidate_steps": [2], "up_hysteresis": 0.1}},
        {"1": [1, 3]},
        {"1": {"candidate_steps": []}},
        {"1": {"candidate_steps": [-1]}},
        {"warmup_batches": 5},
    ]
    real = _sglang(sglang_python, CHECK_ADAPTIVE, configs)
    assert real["default"] == sglang_command.DEFAULT_ADAPTIVE_STEPS, "SGLang's default adaptive table changed"
    for cfg, verdict in zip(configs, real["configs"], strict=True):
        try:
            sglang_command.check_adaptive_config(cfg)
            ours = True
        except sglang_command.CommandError:
            ours = False
        assert ours == verdict["ok"], f"{cfg}: SGLang says {verdict}, the role says {ours}"

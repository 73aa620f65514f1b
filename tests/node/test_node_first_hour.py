"""Ready for the first hour on a real node (issue 13), through real ansible-playbook runs
(ansible-runner) against the real emulator, with stand-ins only for what this machine lacks
(nvidia-smi listing GPUs, an interpreter with a given SGLang version in its metadata).

* The readiness wait prints a progress line while a slow server loads (read from the run's own
  stdout, what the user's terminal shows) and fails at once, with the log tail, when it dies.
* Every node preflight refusal names the fix, and nothing was torn down or launched.
* bench.yml --check on a fresh node folder passes and says what would change.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from nodekit import ROOT, case_outcomes, cases_playbook, emulator_vars, free_port, localhost_inventory, run_playbook

pytestmark = pytest.mark.slow

# The phase (what the server's log says it is doing) stands between the time and the memory once known.
PROGRESS = re.compile(r"localhost \| sglang_server mode (\S+), engine: emulator, time scale 0\.05 \| loading (\d+):(\d\d) "
                      r"of 2:00 \| (?:[^|]+ \(the server's log\) \| )?GPU memory (.+?) \| log: (.+)$", re.M)


def test_readiness_prints_progress_while_loading_and_fails_fast_when_the_server_dies(tmp_path, node_dir):
    (node_dir / "cases").mkdir()
    # Emulated load: 200 s x time scale 0.05 = 10 s; fail-start dies half way through it.
    slow = {"sglang_server_emulator_load_seconds": 200, "sglang_server_ready_progress_every": 1}
    cases = {
        "slow": {"vars": {"mode": "baseline", "sglang_server_port": free_port(), **slow}},
        "dies": {"vars": {"mode": "ngram", "sglang_server_port": free_port(), **slow,
                          "sglang_server_emulator_faults": ["fail-start"],
                          "sglang_server_state_path": str(node_dir / "state" / "dies.json")}},
    }
    run = run_playbook(tmp_path, cases_playbook(tmp_path / "cases.yml", cases),
                       localhost_inventory(**emulator_vars(node_dir, 0)))
    assert run.rc == 0, run.stdout[-4000:]
    out = case_outcomes(node_dir)
    assert not out["slow"]["failed"], out["slow"]
    lines = PROGRESS.findall(run.stdout)
    slow_lines = [m for m in lines if m[0] == "baseline"]
    assert len(slow_lines) >= 2, run.stdout[-3000:]
    elapsed = [int(line[1]) * 60 + int(line[2]) for line in slow_lines]
    assert elapsed == sorted(elapsed), "elapsed grows line by line"
    assert all(re.fullmatch(r"[\d.]+ of [\d.]+ GiB on \d+ GPUs|unknown \(.*\)", line[3]) for line in slow_lines)
    assert all(line[4].strip() and line[4] != "(no log yet)" for line in slow_lines)
    assert "localhost | sglang_server mode baseline, engine: emulator, time scale 0.05 | ready after" in run.stdout
    # The dying server: failed at once (not at the 120 s deadline), with the log tail, and the
    # progress lines before it.
    assert out["dies"]["failed"] and "Wait for readiness" in out["dies"]["task"]
    msg = out["dies"]["msg"]
    assert "exited during startup" in msg and "CUDA out of memory" in msg and "not ready within" not in msg
    after = int(re.search(r"after (\d+)s", msg).group(1))
    assert after < 30, msg
    assert any(m[0] == "ngram" for m in lines), run.stdout[-3000:]


def _fake_nvidia_smi(folder: Path, gpus: int) -> Path:
    """A stand-in nvidia-smi: ``gpus`` idle RTX PRO 6000s, answering the gpu_state queries."""
    rows = "\n".join(f"{i}, GPU-0000000{i}-fake, NVIDIA RTX PRO 6000 Blackwell, 0, 97887, 0, 590.48.01"
                     for i in range(gpus))
    path = folder / f"nvidia-smi-{gpus}"
    path.write_text(f'#!/bin/sh\ncase "$1" in\n  --query-gpu=*) cat <<EOF\n{rows}\nEOF\n;;\n  *) : ;;\nesac\n')
    path.chmod(0o755)
    return path


def _python_with_sglang(folder: Path, version: str) -> Path:
    """A stand-in interpreter: this Python with an sglang <version> in its package metadata."""
    site = folder / f"site-{version}"
    info = site / f"sglang-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    path = folder / f"python-sglang-{version}"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    path.chmod(0o755)
    return path


def test_every_preflight_refusal_names_the_fix_before_anything_is_torn_down_or_launched(tmp_path, node_dir):
    (node_dir / "cases").mkdir()
    model = tmp_path / "models" / "Kimi-K2.5-INT4"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    hf = tmp_path / "hf"
    cached = hf / "hub" / "models--moonshotai--Kimi-K2.5-EAGLE3" / "snapshots" / "0123abc"
    cached.mkdir(parents=True)
    (cached / "config.json").write_text("{}")
    sglang = {  # engine=sglang with stand-ins: 8 GPUs, SGLang 0.5.23 in the interpreter's metadata
        "engine": "sglang", "sglang_server_check_flags": False, "sglang_server_gpu_backend": "nvidia-smi",
        "sglang_server_gpu_nvidia_smi": str(_fake_nvidia_smi(tmp_path, 8)), "sglang_server_tp_size": 8,
        "sglang_python": str(_python_with_sglang(tmp_path, "0.5.23")), "sglang_model_path": str(model),
        "sglang_draft_model_path": "moonshotai/Kimi-K2.5-EAGLE3",
        "sglang_server_environment": {"HF_HUB_OFFLINE": "1", "HF_HOME": str(hf)},
    }
    cases = {
        "emu_disk": {"vars": {"mode": "baseline", "sglang_server_min_free_disk_gib": 1e9}},
        "emu_tp": {"vars": {"mode": "baseline", "sglang_server_tp_size": 4,
                            "sglang_server_emulator_args": ["--emulator-gpus", "2"]}},
        "emu_version": {"vars": {"mode": "baseline", "sglang_server_expected_version": "0.5.22"}},
        "sg_ok": {"vars": {"mode": "eagle3", **sglang}, "tasks_from": "preflight"},
        "sg_model": {"vars": {"mode": "baseline", **sglang, "sglang_model_path": str(tmp_path / "models" / "nope")}},
        "sg_draft_offline": {"vars": {"mode": "eagle3", **sglang, "sglang_server_environment": {
            "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-hf")}}},
        "sg_tp": {"vars": {"mode": "baseline", **sglang,
                           "sglang_server_gpu_nvidia_smi": str(_fake_nvidia_smi(tmp_path, 4))}},
        "sg_version": {"vars": {"mode": "baseline", **sglang,
                                "sglang_python": str(_python_with_sglang(tmp_path, "0.5.17"))}},
    }
    run = run_playbook(tmp_path, cases_playbook(tmp_path / "cases.yml", cases),
                       localhost_inventory(**emulator_vars(node_dir, free_port())))
    assert run.rc == 0, run.stdout[-4000:]
    out = case_outcomes(node_dir)
    assert not out["sg_ok"]["failed"], out["sg_ok"]

    def refused(name, *needles):
        assert out[name]["failed"], f"{name} was not refused"
        assert "Check the node can serve this mode" in out[name]["task"], out[name]
        for needle in needles:
            assert needle in out[name]["msg"], f"{name}: {needle!r} not in {out[name]['msg']!r}"

    refused("emu_disk", "GiB free", "sglang_server_min_free_disk_gib")
    refused("emu_tp", "sglang_server_tp_size is 4 but only 2 GPU(s)", "CUDA_VISIBLE_DEVICES")
    refused("emu_version", "SGLang 0.5.23+specbench-emulator is installed", "sglang_server_expected_version is 0.5.22",
            "sglang_server_expected_version")
    refused("sg_model", "models/nope does not exist on this node", "sglang_server_model_path")
    refused("sg_draft_offline", "moonshotai/Kimi-K2.5-EAGLE3", "HF_HUB_OFFLINE", "huggingface-cli download",
            "sglang_server_draft_model_path")
    refused("sg_tp", "sglang_server_tp_size is 8 but only 4 GPU(s) are visible")
    refused("sg_version", "SGLang 0.5.17 is not a release specbench supports (supported: 0.5.18 to 0.5.23",
            "sglang==0.5.23 is the newest")
    # Nothing launched: no server record, no server log.
    assert not (node_dir / "state").exists() or not list((node_dir / "state").glob("*.json"))
    assert not list(node_dir.glob("logs/*.log"))


def test_tp_size_auto_renders_the_nodes_gpu_count_else_one_and_says_so(tmp_path, node_dir):
    """sglang_server_tp_size's default, auto: engine=sglang renders the GPUs CUDA_VISIBLE_DEVICES names, else
    those counted on the node (a stand-in nvidia-smi), else 1; the emulator --emulator-gpus, else its
    profile's GPUs. Each is printed with where it came from; a number given is rendered as given."""
    (node_dir / "cases").mkdir()
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    sglang = {"engine": "sglang", "sglang_server_check_flags": False, "sglang_server_check_node": False,
              "sglang_server_gpu_backend": "nvidia-smi", "sglang_server_tp_size": "auto",
              "sglang_python": str(_python_with_sglang(tmp_path, "0.5.23")), "sglang_model_path": str(model)}
    emulator = {"mode": "baseline", "sglang_server_tp_size": "auto", "sglang_server_check_flags": False}
    cases = {
        "sg_counted": {"vars": {"mode": "baseline", **sglang,
                                "sglang_server_gpu_nvidia_smi": str(_fake_nvidia_smi(tmp_path, 4))}},
        "sg_visible": {"vars": {"mode": "baseline", **sglang,
                                "sglang_server_gpu_nvidia_smi": str(_fake_nvidia_smi(tmp_path, 4)),
                                "sglang_server_environment": {"CUDA_VISIBLE_DEVICES": "0, 1"}}},
        "sg_none": {"vars": {"mode": "baseline", **sglang,
                             "sglang_server_gpu_nvidia_smi": str(tmp_path / "no-nvidia-smi")}},
        "sg_given": {"vars": {"mode": "baseline", **sglang, "sglang_server_tp_size": 2,
                              "sglang_server_gpu_nvidia_smi": str(_fake_nvidia_smi(tmp_path, 4))}},
        "emu_default": {"vars": {**emulator, "sglang_server_emulator_profile": ""}},
        "emu_llama": {"vars": {**emulator, "sglang_server_emulator_profile": "llama-3.1-8b-1x-h100"}},
        "emu_gpus": {"vars": {**emulator, "sglang_server_emulator_args": ["--emulator-gpus", "2"]}},
    }
    for case in cases.values():
        case["tasks_from"] = "preflight"
    run = run_playbook(tmp_path, cases_playbook(tmp_path / "cases.yml", cases, record="sglang_server_command"),
                       localhost_inventory(**emulator_vars(node_dir, free_port())))
    assert run.rc == 0, run.stdout[-4000:]
    out = case_outcomes(node_dir)
    rendered = {}
    for name, outcome in out.items():
        assert not outcome["failed"], (name, outcome)
        args = outcome["fact"]["args"]
        rendered[name] = int(args[args.index("--tp-size") + 1])
    assert rendered == {"sg_counted": 4, "sg_visible": 2, "sg_none": 1, "sg_given": 2,
                        "emu_default": 8, "emu_llama": 1, "emu_gpus": 2}, rendered
    said = [(n, " ".join(why.split())) for n, why in
            re.findall(r"sglang_server_tp_size auto: --tp-size (\d+) on localhost \(([^)]*)", run.stdout)]
    assert [int(n) for n, _why in said] == [4, 2, 1, 8, 1, 2], said
    assert "GPUs counted on the node (gpu_backend nvidia-smi" in said[0][1]
    assert "CUDA_VISIBLE_DEVICES" in said[1][1] and "no GPU counted on the node" in said[2][1]
    assert "kimi-k2.5-8x-rtx-pro-6000" in said[3][1] and "--emulator-gpus" in said[5][1]


def test_the_emulator_profiles_gpus_are_the_emulators_own():
    """sglang_server_emulator_profile_gpus (what auto renders on the emulator) holds every profile's
    default_tp_size, and "" the default profile's."""
    import yaml

    sys.path.insert(0, str(ROOT / "files"))
    from sglang_emulator.profiles import DEFAULT_PROFILE, PROFILES

    table = yaml.safe_load((ROOT / "roles" / "sglang_server" / "vars" / "main.yml").read_text())[
        "sglang_server_emulator_profile_gpus"]
    assert table == {"": PROFILES[DEFAULT_PROFILE]["default_tp_size"],
                     **{name: profile["default_tp_size"] for name, profile in PROFILES.items()}}


def test_bench_yml_refuses_in_its_preflight_play_before_any_teardown(tmp_path, node_dir):
    run = run_playbook(tmp_path, "bench.yml", localhost_inventory(**emulator_vars(node_dir, free_port())),
                       extravars={"mode": "baseline", "sglang_server_min_free_disk_gib": 1e9,
                                  "results_dir": str(tmp_path / "results")})
    assert run.rc != 0
    failed = run.failures()
    assert failed and "Check the node can serve this mode" in failed[0][1], failed
    assert "sglang_server_min_free_disk_gib" in failed[0][2]
    assert not run.task_started("gpu_teardown |"), "the teardown ran after a refused preflight"
    assert not run.task_started("Start the server")
    assert not list((node_dir / "state").glob("**/*.json")), "a refused preflight recorded a launch"


def test_check_mode_on_a_fresh_node_passes_and_reports_what_would_change(tmp_path):
    fresh = tmp_path / "fresh-node"  # does not exist yet: nothing was ever shipped or launched
    results = tmp_path / "results"
    hostvars = emulator_vars(fresh, free_port())
    del hostvars["sglang_server_emulator_path"]  # the node's own copy, which is not there yet
    for playbook, extra in (("bench.yml", {"mode": "baseline"}),
                            ("playbooks/compare.yml", {"compare_modes": ["baseline", "eagle3"]})):
        run = run_playbook(tmp_path, playbook, localhost_inventory(**hostvars),
                           extravars={**extra, "results_dir": str(results), "bench_concurrency": [1]}, check=True)
        assert run.rc == 0, f"{playbook}:\n{run.stdout[-5000:]}"
        assert "the emulator is not at" not in run.stdout
        would = run.changed("localhost")
        assert any("bench_scripts" in t for t in would), (playbook, would)
        assert any("Start the server" in t for t in would), (playbook, would)
        assert "would ship" in run.stdout or "would" in run.stdout
    assert not fresh.exists() or not list(fresh.rglob("*.json")), "check mode wrote on the node"
    assert not results.exists() or not list(results.rglob("*.json")), json.dumps(
        [str(p) for p in results.rglob("*")])

"""Issue 13's pure logic, without Ansible: the launcher default and the environment a systemd unit
gets, --enable-metrics whatever extra args say, the node preflight checks, the progress line,
the honest labels (emulator version, node speed, the report's banner). Real files, real
processes; only systemd itself is run where systemd is PID 1 (skipped elsewhere, saying why)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
import yaml
from nodekit import ROOT

from ansible_collections.specbench.core.plugins.module_utils.engines.sglang import preflight as sglang_preflight
from ansible_collections.specbench.core.plugins.module_utils.engines.sglang import versions
from ansible_collections.specbench.core.plugins.module_utils.engines.sglang.command import render
from ansible_collections.specbench.core.plugins.module_utils.launch import process as sglang_process
from ansible_collections.specbench.core.plugins.module_utils.report.render import render_markdown
from ansible_collections.specbench.core.plugins.module_utils.specbench_client import labels
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.sweep import format_level_line

SETTINGS = [{"name": "tp_size", "flag": "--tp-size", "aliases": [], "variable": "sglang_server_tp_size",
             "kind": "count", "value": 8}]
MODES = {"baseline": {"flags": {}}}


def _argv(**over):
    return render({"engine": "sglang", "mode": "baseline", "modes": MODES, "settings": SETTINGS,
                   "model_path": "/m", "port": 30000, **over})["args"]


# ------------------------------------------------------------------ launcher and environment


def test_the_launcher_defaults_to_session_in_the_role_and_the_module():
    defaults = yaml.safe_load((ROOT / "roles/sglang_server/defaults/main.yml").read_text())
    assert defaults["sglang_server_launcher"] == "session"
    doc = (ROOT / "plugins/modules/sglang_launch.py").read_text()
    assert '"choices": ["auto", "session", "systemd"], "default": "session"' in doc


def test_a_systemd_unit_gets_the_sessions_cuda_hf_nccl_path_and_venv_plus_the_extras():
    session = {"PATH": "/opt/venv/bin:/usr/bin", "HOME": "/root", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
               "VIRTUAL_ENV": "/opt/venv", "CUDA_HOME": "/usr/local/cuda", "CUDA_VISIBLE_DEVICES": "0,1",
               "HF_HOME": "/models/hf", "HF_HUB_OFFLINE": "1", "NCCL_P2P_DISABLE": "1", "SSH_AUTH_SOCK": "/tmp/x",
               "PYTHONSTARTUP": "/x", "LANG": "C.UTF-8", "SECRET_TOKEN": "hidden"}
    env = sglang_process.forwarded_environment(session, {"NCCL_P2P_DISABLE": "0", "SGLANG_X": 1})
    assert env == {"PATH": "/opt/venv/bin:/usr/bin", "HOME": "/root", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
                   "VIRTUAL_ENV": "/opt/venv", "CUDA_HOME": "/usr/local/cuda", "CUDA_VISIBLE_DEVICES": "0,1",
                   "HF_HOME": "/models/hf", "HF_HUB_OFFLINE": "1", "NCCL_P2P_DISABLE": "0", "SGLANG_X": "1"}
    argv = sglang_process.systemd_run_argv("u", ["python3", "-m", "sglang.launch_server"], "/l.log", "/run", env)
    setenv = [a for a in argv if a.startswith("--setenv=")]
    assert setenv == [f"--setenv={k}={v}" for k, v in sorted(env.items())]
    assert argv[argv.index("--") + 1:] == ["python3", "-m", "sglang.launch_server"]
    assert "--property=KillMode=control-group" in argv and "--property=StandardOutput=append:/l.log" in argv


def _systemd_is_pid1() -> str | None:
    try:
        comm = open("/proc/1/comm").read().strip()
    except OSError:
        comm = "?"
    if comm != "systemd" or not os.path.isdir("/run/systemd/system"):
        return f"systemd is not PID 1 here (PID 1 is {comm!r}): a transient unit cannot be started"
    if os.geteuid() != 0 or not shutil.which("systemd-run"):
        return "systemd-run needs root here"
    return None


@pytest.mark.skipif(_systemd_is_pid1() is not None, reason=_systemd_is_pid1() or "")
def test_systemd_launch_really_forwards_the_environment(tmp_path, monkeypatch):
    """On a node with systemd: a transient unit runs, logs to the file and sees the forwarded
    environment (and not what is left out); the unit is stopped afterwards."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("SPECBENCH_NOT_FORWARDED", "x")
    unit = f"specbench-test-{uuid.uuid4().hex[:8]}"
    script = "import os,time; print(sorted(k for k in os.environ)); print(os.environ['EXTRA']); time.sleep(30)"
    log = tmp_path / "unit.log"
    started = sglang_process.launch([sys.executable, "-c", script], str(log), "systemd", unit, str(tmp_path),
                                    {"EXTRA": "yes"})
    try:
        assert started["unit"] == unit and started["launcher"] == "systemd" and started["pid"]
        deadline = time.monotonic() + 20
        while "yes" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        text = log.read_text()
        assert "'HF_HUB_OFFLINE'" in text and "'NCCL_DEBUG'" in text and "'PATH'" in text
        assert "SPECBENCH_NOT_FORWARDED" not in text and "yes" in text
    finally:
        subprocess.run(["systemctl", "stop", unit], check=False, capture_output=True)


# ------------------------------------------------------------------ metrics always on


def test_enable_metrics_is_rendered_whatever_the_extra_args_say():
    assert _argv().count("--enable-metrics") == 1
    kept = _argv(extra_args=["--trust-remote-code"])
    assert kept.count("--enable-metrics") == 1 and "--trust-remote-code" in kept
    assert _argv(extra_args=["--enable-metrics"]).count("--enable-metrics") == 1
    assert "--enable-metrics" not in _argv(enable_metrics=False)
    defaults = yaml.safe_load((ROOT / "roles/sglang_server/defaults/main.yml").read_text())
    assert defaults["sglang_server_extra_args"] == [] and defaults["sglang_server_enable_metrics"] is True


# ------------------------------------------------------------------ preflight checks


def test_paths_local_folder_hub_name_and_offline_cache(tmp_path):
    model = tmp_path / "Kimi"
    model.mkdir()
    (model / "config.json").write_text("{}")
    empty = tmp_path / "empty"
    empty.mkdir()
    hf = tmp_path / "hf"
    snap = hf / "hub" / "models--org--Draft" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")

    def item(path):
        return {"name": "model", "path": str(path), "variable": "v"}

    assert sglang_preflight.check_paths([item(model)], {}) == []
    assert "is empty" in sglang_preflight.check_paths([item(empty)], {})[0]
    missing = sglang_preflight.check_paths([item(tmp_path / "nope")], {})[0]
    assert "does not exist on this node" in missing and "fix v" in missing
    # A hub name: fine online (SGLang downloads it); offline only when in the cache.
    assert sglang_preflight.check_paths([item("org/Other")], {}) == []
    assert sglang_preflight.check_paths([item("org/Draft")], {"HF_HUB_OFFLINE": "1", "HF_HOME": str(hf)}) == []
    offline = sglang_preflight.check_paths([item("org/Other")], {"HF_HUB_OFFLINE": "1", "HF_HOME": str(hf)})[0]
    assert "HF_HUB_OFFLINE" in offline and str(hf / "hub") in offline and "huggingface-cli download" in offline


def test_disk_gpus_and_version_checks_name_the_fix(tmp_path):
    assert sglang_preflight.check_disk(str(tmp_path / "not" / "yet"), 0.001) == []
    assert "sglang_server_min_free_disk_gib" in sglang_preflight.check_disk(str(tmp_path), 1e9)[0]
    assert sglang_preflight.check_gpus(8, 8, "x") == [] and sglang_preflight.check_gpus(8, None, "x") == []
    assert "only 4 GPU(s)" in sglang_preflight.check_gpus(8, 4, "nvml")[0]
    assert sglang_preflight.check_version("0.5.23+specbench-emulator", "0.5.23", "p") == []
    wrong = sglang_preflight.check_version("0.5.20", "0.5.23", "/venv/bin/python")[0]
    assert "sglang==0.5.23" in wrong and 'sglang_server_expected_version to "0.5.20"' in wrong
    assert "has no SGLang installed" in sglang_preflight.check_version(None, "0.5.23", "p")[0]
    # Empty: every release of the supported table passes, anything else is refused by name with the range.
    for release in versions.RELEASES:
        assert sglang_preflight.check_version(release, "", "p") == [], release
    for other in ("0.5.17", "0.5.24", "0.6.0"):
        refused = sglang_preflight.check_version(other, "", "/venv/bin/python")[0]
        assert f"SGLang {other} is not a release specbench supports (supported: 0.5.18 to 0.5.23" in refused
        assert f'sglang_server_expected_version: "{other}"' in refused
    # A release outside the table, named by the user, is held exactly.
    assert sglang_preflight.check_version("0.5.24", "0.5.24", "p") == []
    assert versions.supports("0.5.18", "openai_spec_details") is False
    assert versions.supports("0.5.23+specbench-emulator", "openai_spec_details") is True
    assert versions.supports("0.4.0", "openai_spec_details") is None
    assert versions.by_kernel_args(19) == ["0.5.18"] and versions.by_kernel_args(22)[-1] == "0.5.23"


def test_the_installed_version_is_read_from_metadata_without_importing_sglang(tmp_path):
    site = tmp_path / "site"
    (site / "sglang-0.5.20.dist-info").mkdir(parents=True)
    (site / "sglang-0.5.20.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.20\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    assert sglang_preflight.installed_sglang(sys.executable, env) == "0.5.20"
    assert sglang_preflight.installed_sglang(sys.executable, {**os.environ, "PYTHONPATH": str(tmp_path)}) is None


# ------------------------------------------------------------------ progress line


def test_progress_snapshot_and_line_from_a_real_log(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("old run\n==== header\n[TP0] Load weight begin. avail mem=94.1 GB\n\n")
    assert sglang_process.last_log_line(str(log), 0) == "[TP0] Load weight begin. avail mem=94.1 GB"
    mem = sglang_process.gpu_memory(lambda: [{"memory_used_mib": 2048, "memory_total_mib": 4096}] * 2)
    line = sglang_process.progress_line({"elapsed_s": 95.2, "timeout_s": 1800, "log_line": "[TP0] Load",
                                         "gpu_memory": mem})
    assert line == "loading 1:35 of 30:00 | GPU memory 4.0 of 8.0 GiB on 2 GPUs | log: [TP0] Load"

    def broken():
        raise OSError("NVML: driver not loaded")
    assert "driver not loaded" in sglang_process.progress_line({"gpu_memory": sglang_process.gpu_memory(broken)})


# ------------------------------------------------------------------ honest labels


def test_the_emulator_reports_a_marked_version_and_still_takes_0_5_23_flags():
    sys.path.insert(0, str(ROOT / "files"))
    try:
        import sglang_emulator
    finally:
        sys.path.remove(str(ROOT / "files"))
    assert sglang_emulator.REPORTED_VERSION == "0.5.23+specbench-emulator"
    assert sglang_preflight.public_version(sglang_emulator.REPORTED_VERSION) == sglang_emulator.SGLANG_VERSION


def test_node_speed_lives_in_one_place_and_the_progress_line_says_engine_and_scale():
    server = {"engine": "emulator", "version": "0.5.23+specbench-emulator",
              "server_info": {"emulator": {"time_scale": 0.1}}}
    assert labels.emulation(server) == {"time_scale": 0.1}
    assert labels.node_speed(921.0, 0.1) == pytest.approx(92.1)
    level = {"concurrency": 1, "output_tok_per_s": 921.0, "output_tok_per_s_ci95": [910.0, 930.0],
             "ttft_ms": {"p50": 4.0}, "requests_ok": 5, "requests_failed": 0}
    line = format_level_line(level, server=server)
    assert line.startswith("engine: emulator, time scale 0.1 | C=   1")
    assert "92.1 tok/s at node speed [91.0, 93.0] (921.0 wall-clock)" in line and "TTFT p50 40 ms" in line
    real = format_level_line(level, server={"engine": "sglang", "version": "0.5.23", "server_info": {}})
    assert real.startswith("engine: sglang | C=   1") and "921.0 tok/s" in real and "node speed" not in real
    assert format_level_line(level).startswith("C=   1")  # the client's own CLI, unchanged
    # engine=external against an emulator: marked version, no recorded time scale -> wall-clock, said so.
    unknown = format_level_line(level, server={"version": "0.5.23+specbench-emulator", "model": "m"})
    assert unknown.startswith("engine: emulator, time scale unknown | C=   1")
    assert "921.0 tok/s wall-clock [910.0, 930.0]" in unknown and "node speed" not in unknown


def test_a_level_on_the_emulator_is_recorded_at_node_speed_with_the_wall_clock_beside_it():
    server = {"engine": "emulator", "server_info": {"emulator": {"time_scale": 0.1}}}
    level = {"concurrency": 1, "output_tok_per_s": 921.4, "output_tok_per_s_ci95": [910.0, 930.0],
             "request_per_s": 3.6, "ttft_ms": {"p50": 4.0, "mean": 4.2}, "tpot_ms": {"mean": 1.08, "mean_ci95": [1.0, 1.2]},
             "decode_tok_per_s_per_stream": {"mean": 926.0}, "server_output_tok_per_s": 920.0,
             "requests_ok": 5, "requests_failed": 0, "emulator_model": {"output_tok_per_s": 926.0},
             "request_latencies": {"columns": ["ttft_ms", "tpot_ms", "e2e_ms", "output_tokens"],
                                   "rows": [[4.0, 1.1, 74.0, 64], [5.0, None, 5.0, 1]]}}
    node = labels.level_at_node_speed(json.loads(json.dumps(level)), server)
    # each request's latencies at node speed as the percentiles are (goodput compares them with the SLO), tokens kept
    assert node["request_latencies"]["rows"] == [[40.0, 11.0, 740.0, 64], [50.0, None, 50.0, 1]]
    assert node["output_tok_per_s"] == pytest.approx(92.14) and node["wall_clock_output_tok_per_s"] == 921.4
    assert node["output_tok_per_s_ci95"] == pytest.approx([91.0, 93.0])
    assert node["ttft_ms"]["p50"] == pytest.approx(40.0) and node["wall_clock_ttft_ms"]["p50"] == 4.0
    assert node["tpot_ms"]["mean_ci95"] == pytest.approx([10.0, 12.0])
    assert node["request_per_s"] == pytest.approx(0.36) and node["server_output_tok_per_s"] == pytest.approx(92.0)
    assert node["emulator_model"]["output_tok_per_s"] == pytest.approx(92.6)
    assert "node speed" in node["figures"] and node["requests_ok"] == 5
    assert labels.level_at_node_speed(node, server) is node and node["output_tok_per_s"] == pytest.approx(92.14)
    line = format_level_line(node, server=server)
    assert "92.1 tok/s at node speed [91.0, 93.0] (921.4 wall-clock)" in line and "TTFT p50 40 ms" in line
    real = labels.level_at_node_speed(dict(level), {"engine": "sglang", "server_info": {}})
    assert real["output_tok_per_s"] == 921.4 and "wall_clock_output_tok_per_s" not in real


def test_the_report_opens_with_a_banner_when_any_mode_ran_on_the_emulator():
    summary = json.loads(json.dumps({"host": "n", "run_id": "r", "modes": ["baseline", "eagle3"], "complete": True,
                                     "servers": {
                                         "baseline": {"engine": "sglang", "version": "0.5.23", "command": ["python3"]},
                                         "eagle3": {"engine": "emulator", "version": "0.5.23+specbench-emulator",
                                                    "command": ["python3", "emu", "--emulator-time-scale", "0.1"]}}}))
    lines = render_markdown(summary).splitlines()
    assert lines[0] == "# Speculative decoding A/B: n" and lines[1] == ""
    banner = lines[2]  # the report opens with it, right under the title
    assert banner.startswith("> **EMULATED, NOT MEASURED ON GPUS**: mode(s) `eagle3` ran on the specbench")
    assert "`baseline`" not in banner and "time scale 0.1" in banner and "emulated node's own" in lines[3]
    assert "wall_clock_*" in lines[3]
    real = {"baseline": {"engine": "sglang", "version": "0.5.23"}}
    assert labels.emulated_banner(real) == []
    external = labels.emulated_banner({"eagle3": {"engine": "external", "version": "0.5.23+specbench-emulator"}})
    assert "time scale unknown" in external[0]

"""The node plugins' pure logic, without Ansible: rendering and fairness, flag checks, the LXC
config editor, the port-holder lookup (a real socket), the systemd command, the script bundle."""
from __future__ import annotations

import hashlib
import os
import socket

import pytest
import yaml
from nodekit import ROOT

from ansible_collections.specbench.core.plugins.module_utils.engines.sglang.command import CommandError, render
from ansible_collections.specbench.core.plugins.module_utils.engines.sglang.flags import check
from ansible_collections.specbench.core.plugins.module_utils.launch import process as sglang_process
from ansible_collections.specbench.core.plugins.module_utils.node import proxmox_lxc
from ansible_collections.specbench.core.plugins.module_utils.node import scripts as bench_scripts

SETTINGS = [
    {"name": "tp_size", "flag": "--tp-size", "aliases": ["--tensor-parallel-size"], "variable": "sglang_server_tp_size",
     "kind": "count", "value": 8},
    {"name": "mem_fraction_static", "flag": "--mem-fraction-static", "aliases": [],
     "variable": "sglang_server_mem_fraction_static", "kind": "fraction", "value": 0.88},
    {"name": "max_running_requests", "flag": "--max-running-requests", "aliases": [],
     "variable": "sglang_server_max_running_requests", "kind": "count", "value": 256, "why": "capped at 48"},
    {"name": "chunked_prefill_size", "flag": "--chunked-prefill-size", "aliases": [],
     "variable": "sglang_server_chunked_prefill_size", "kind": "count_or_off", "value": -1},
]
MODES = {
    "baseline": {"flags": {}},
    "eagle3": {"flags": {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": "/d",
                         "--speculative-num-steps": None},
               "required": {"--speculative-draft-model-path": "sglang_server_draft_model_path"}},
    "adaptive": {"flags": {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": "/d",
                           "--speculative-num-steps": 3, "--speculative-adaptive": True}},
}


def _params(**over):
    return {"engine": "sglang", "mode": "eagle3", "modes": MODES, "settings": SETTINGS, "model_path": "/m",
            "port": 30000, "python": "/venv/bin/python", **over}


def test_render_shared_settings_then_mode_flags():
    out = render(_params())
    assert out["argv"] == [
        "/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1",
        "--port", "30000", "--tp-size", "8", "--mem-fraction-static", "0.88", "--max-running-requests", "256",
        "--chunked-prefill-size", "-1", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d",
        "--enable-metrics",
    ]
    assert out["confounders"] == [] and out["settings"]["mem_fraction_static"] == 0.88


@pytest.mark.parametrize(("over", "needles"), [
    ({"mode_extra_args": {"eagle3": ["--max-running-requests", "48"]}},
     ["max_running_requests", "sglang_server_max_running_requests"]),
    ({"extra_args": ["--tensor-parallel-size=2"]}, ["tp_size", "sglang_server_tp_size"]),
    ({"extra_args": ["--mem-frac", "0.7"]}, ["--mem-frac", "mem_fraction_static"]),
    ({"extra_args": ["--speculative-num-steps", "2"]}, ["baseline included", "sglang_server_mode_extra_args"]),
    ({"extra_args": ["--port", "1"]}, ["sglang_server_port"]),
    ({"mode_overrides": {"eagle3": {"mem": 0.8}}}, ["'mem'", "mem_fraction_static"]),
    ({"mode_overrides": {"eagle4": {}}}, ["eagle4", "baseline, eagle3, adaptive"]),
    ({"mode": "eagle4"}, ["eagle4", "valid modes are baseline, eagle3, adaptive"]),
    ({"mode": ""}, ["pass -e mode=<one of baseline, eagle3, adaptive>"]),
    ({"modes": {**MODES, "eagle3": {"flags": {"--speculative-algorithm": "EAGLE3", "--mem-fraction-static": 0.7}}}},
     ["mode eagle3 sets --mem-fraction-static", "sglang_server_mode_overrides"]),
    ({"modes": {**MODES, "eagle3": {"flags": {}, "required": {"--speculative-draft-model-path": "draft_var"}}}},
     ["mode eagle3 needs --speculative-draft-model-path", "draft_var"]),
    ({"settings": [{**SETTINGS[0], "value": None}]}, ["sglang_server_tp_size is not set"]),
    ({"settings": [{**SETTINGS[1], "value": 1.2}]}, ["between 0 and 1"]),
    ({"settings": [{**SETTINGS[3], "value": 0}]}, ["or -1 to turn it off"]),
    ({"engine": "external"}, ["engine=emulator or engine=sglang"]),
    ({"model_path": ""}, ["sglang_server_model_path is not set"]),
    ({"port": "x"}, ["sglang_server_port must be a TCP port"]),
    ({"mode": "adaptive", "adaptive_config": {"1": {"candidate_steps": [1, 2]}}},
     ["sglang_server_adaptive_num_steps", "[1, 2]"]),
    ({"mode": "adaptive", "adaptive_config": {"x": 1}}, ["'x'", "ema_alpha"]),
    ({"engine": "emulator", "emulator_path": "/e", "emulator": {"args": ["--tp-size", "2"]}},
     ["only --emulator-* flags"]),
    ({"engine": "emulator", "emulator_path": "/e", "emulator": {"time_scale": 0}}, ["positive number"]),
])
def test_render_refuses_naming_the_setting_and_the_fix(over, needles):
    with pytest.raises(CommandError) as err:
        render(_params(**over))
    for needle in needles:
        assert needle in str(err.value)


@pytest.mark.parametrize(("table", "steps"), [
    ({}, 3),  # SGLang's default table: candidates 0, 1, 3, 5, 7
    ({"1": {"candidate_steps": [0]}}, 0),  # a compare run's table where speculation pays nowhere
    ({"1": {"candidate_steps": [1, 2]}, "32": {"candidate_steps": [0]}}, 1),  # rows capped at 2 steps
])
def test_adaptive_starting_steps_unset_are_sglangs_own_pick_from_the_table(table, steps):
    """SGLang, given no --speculative-num-steps, starts at the middle of the table's candidate steps
    (sglang/srt/arg_groups/speculative_hook.py, _init_adaptive_speculative_params): the command
    says so explicitly, so any table a compare run recommends launches as it is."""
    modes = {**MODES, "adaptive": {"flags": {**MODES["adaptive"]["flags"], "--speculative-num-steps": None,
                                             "--speculative-num-draft-tokens": None}}}
    argv = render(_params(mode="adaptive", modes=modes, adaptive_config=table))["argv"]
    assert argv[argv.index("--speculative-num-steps") + 1] == str(steps)
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == str(steps + 1)


def test_override_by_name_is_a_recorded_confounder_and_emulator_gets_the_same_flags():
    out = render(_params(mode_overrides={"eagle3": {"mem_fraction_static": 0.8}}, engine="emulator",
                         emulator_path="~/node/sglang_emulator", emulator_python="python3",
                         emulator={"device_dir": "/dev-dir", "profile": "p", "time_scale": 0.1, "faults": ["fail-start"]}))
    assert out["argv"][:2] == ["python3", os.path.expanduser("~/node/sglang_emulator")]
    assert out["argv"][out["argv"].index("--mem-fraction-static") + 1] == "0.8"
    assert out["argv"][-8:] == ["--emulator-device-dir", "/dev-dir", "--emulator-profile", "p",
                                "--emulator-time-scale", "0.1", "--emulator-fault", "fail-start"]
    assert len(out["confounders"]) == 1 and "0.88" in out["confounders"][0]


def test_role_modes_table_is_the_contract():
    data = yaml.safe_load((ROOT / "roles" / "sglang_server" / "vars" / "main.yml").read_text())
    assert list(data["sglang_server_builtin_modes"]) == [
        "baseline", "eagle3", "eagle", "nextn", "ngram", "standalone", "eagle3-adaptive"]
    names = [s["name"] for s in data["sglang_server_capacity_settings"]]
    assert names == ["tp_size", "mem_fraction_static", "max_running_requests", "context_length",
                     "cuda_graph_max_bs", "chunked_prefill_size"]


def test_flag_check_names_the_replacement_both_ways():
    renames = [{"old": "--cuda-graph-max-bs", "new": "--cuda-graph-max-bs-decode", "version": "0.5.20"}]
    new = {"version": "0.5.23", "options": ["--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill", "--port"]}
    old = {"version": "0.5.19", "options": ["--cuda-graph-max-bs", "--port"]}
    [msg] = check(["--cuda-graph-max-bs", "8"], new, renames, {"--cuda-graph-max-bs": "sglang_server_x"}, "here")
    assert "renamed to --cuda-graph-max-bs-decode in SGLang 0.5.20" in msg and "sglang_server_x" in msg
    [msg] = check(["--cuda-graph-max-bs-decode=8"], old, renames, {}, "here")
    assert "predates 0.5.20" in msg and "use --cuda-graph-max-bs." in msg
    [msg] = check(["--prot", "1"], new, [], {}, "here")
    assert "Did you mean --port?" in msg
    assert check(["--port", "1"], {**new, "parse_error": "bad value"}, [], {}, "here") == [
        "SGLang 0.5.23 here refuses the command: bad value"]


def test_lxc_lines_go_to_the_main_section_once():
    conf = "#desc\narch: amd64\nmemory:  512\n\n[snap]\narch: amd64\n"
    lines = ["lxc.cgroup2.devices.allow: c 195:* rwm", "memory: 512"]
    new, added = proxmox_lxc.ensure_lines(conf, lines)
    assert added == ["lxc.cgroup2.devices.allow: c 195:* rwm"]
    assert new == "#desc\narch: amd64\nmemory:  512\nlxc.cgroup2.devices.allow: c 195:* rwm\n\n[snap]\narch: amd64\n"
    assert proxmox_lxc.ensure_lines(new, lines) == (new, [])
    assert proxmox_lxc.ensure_lines("arch: amd64", lines)[0] == "arch: amd64\n" + "\n".join(lines) + "\n"


def test_lxc_host_facts(tmp_path):
    text = "Character devices:\n195 nvidia-frontend\n510 nvidia-uvm\n511 nvidia-uvm-tools\n"
    assert proxmox_lxc.uvm_major(text) == 510
    assert proxmox_lxc.uvm_major("195 nvidia\n") is None
    line = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build  (x@y)  Tue"
    assert proxmox_lxc.kernel_module_version(line) == "590.48.01"
    assert proxmox_lxc.kernel_module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue") == \
        "550.54.15"
    with pytest.raises(proxmox_lxc.HostError, match="proxmox_lxc_pct"):
        proxmox_lxc.host_info(str(tmp_path / "pct"), str(tmp_path), 129, "/proc/devices", "/dev", [], 195, None)


def test_port_holder_names_the_listening_process():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert sglang_process.port_in_use("127.0.0.1", port)
        assert [h["pid"] for h in sglang_process.port_holder(port)] == [os.getpid()]
        with pytest.raises(sglang_process.LaunchError, match=f"pid {os.getpid()}"):
            sglang_process.check_port("127.0.0.1", port)
    assert not sglang_process.port_in_use("127.0.0.1", port)


def test_systemd_unit_command_keeps_the_group_and_the_log():
    argv = sglang_process.systemd_run_argv("specbench-sglang-30000", ["python3", "-m", "sglang.launch_server"],
                                           "/n/logs/s.log", "/n/run", {"A": "1"})
    assert argv[:3] == ["systemd-run", "--unit=specbench-sglang-30000", "--collect"]
    assert "--property=KillMode=control-group" in argv
    assert "--property=StandardOutput=append:/n/logs/s.log" in argv and "--setenv=A=1" in argv
    assert argv[-4:] == ["--", "python3", "-m", "sglang.launch_server"]


def test_bundle_checks_every_file_by_sha256(tmp_path):
    src = tmp_path / "root" / "files" / "tool"
    src.mkdir(parents=True)
    (src / "a.py").write_text("print(1)\n")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"x")
    entries, skipped = bench_scripts.manifest(str(tmp_path / "root"), [
        {"src": "files/tool", "dest": "tool", "mode": "0755"}, {"src": "missing.py", "dest": "m.py", "optional": True}])
    assert [e["dest"] for e in entries] == ["tool/a.py"] and skipped == ["missing.py (optional, absent on the controller)"]
    node = tmp_path / "node"
    assert bench_scripts.verify(str(node), entries)["missing"] == ["tool/a.py"]
    tar = bench_scripts.bundle(entries, str(tmp_path))
    assert bench_scripts.install(str(node), tar, entries) == ["tool/a.py"]
    assert (node / "tool" / "a.py").stat().st_mode & 0o777 == 0o755
    assert bench_scripts.verify(str(node), entries)["ok"] == ["tool/a.py"]
    (src / "a.py").write_text("print(2)\n")
    with pytest.raises(bench_scripts.ScriptsError, match="changed on the controller"):
        bench_scripts.bundle(entries, str(tmp_path))
    with pytest.raises(bench_scripts.ScriptsError, match="without '..'"):
        bench_scripts.manifest(str(tmp_path / "root"), [{"src": "files/tool", "dest": "../x"}])
    assert hashlib.sha256((node / "tool" / "a.py").read_bytes()).hexdigest() == entries[0]["sha256"]


def test_readiness_falls_back_to_health_when_health_generate_is_missing(tmp_path):
    import http.server
    import threading

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's API
            seen.append(self.path)
            self.send_response(404 if self.path == "/health_generate" else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        ready = sglang_process.wait_ready(url, os.getpid(), None, None, str(tmp_path / "log"), 0, timeout=30)
    finally:
        server.shutdown()
    assert ready["probe"] == "/health" and seen == ["/health_generate", "/health"]


def test_readiness_fails_at_once_with_the_log_tail_when_the_server_is_gone(tmp_path):
    import subprocess

    log = tmp_path / "server.log"
    log.write_text("old launch\n==== new\nRuntimeError: Not enough memory.\n")
    child = subprocess.Popen(["true"])
    child.wait()
    with pytest.raises(sglang_process.LaunchError) as err:
        sglang_process.wait_ready("http://127.0.0.1:9", child.pid, None, None, str(log), len("old launch\n"),
                                  timeout=600)
    assert "exited during startup" in str(err.value) and "Not enough memory" in str(err.value)
    assert "old launch" not in str(err.value)

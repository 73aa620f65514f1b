"""Role sglang_server against the real emulator, through real ansible-playbook runs (ansible-runner).

Every serving mode is launched and reaches ready; each bad input is refused with a message that
names the problem and the fix, before anything launches.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request

import pytest
from nodekit import (
    PLAYBOOKS,
    case_outcomes,
    cases_playbook,
    emulator_vars,
    free_port,
    localhost_inventory,
    proc_table,
    run_playbook,
)

MODES = {
    "baseline": None,
    "eagle3": "EAGLE3",
    "eagle": "EAGLE",
    "nextn": "NEXTN",
    "ngram": "NGRAM",
    "standalone": "STANDALONE",
    "eagle3-adaptive": "EAGLE3",
}
SHARED = {
    "--tp-size": "1",
    "--mem-fraction-static": "0.88",
    "--max-running-requests": "256",
    "--context-length": "32768",
    "--cuda-graph-max-bs-decode": "256",
    "--chunked-prefill-size": "8192",
}

pytestmark = pytest.mark.slow


def _flag(argv: list[str], flag: str):
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_every_mode_launches_on_the_emulator_and_reaches_ready(tmp_path, node_dir):
    ports = {mode: free_port() for mode in MODES}
    (node_dir / "facts").mkdir()
    run = run_playbook(tmp_path, PLAYBOOKS / "all_modes.yml",
                       localhost_inventory(**emulator_vars(node_dir, 0)), extravars={"test_ports": ports})
    assert run.rc == 0, run.stdout[-4000:]
    for mode, algorithm in MODES.items():
        fact = json.loads((node_dir / "facts" / f"{mode}.json").read_text())
        recorded = json.loads((node_dir / "state" / f"server-{mode}.json").read_text())
        assert recorded == fact, f"{mode}: the record for the teardown differs from the fact"
        argv = fact["command"]
        # The exact command, as an argv list: the emulator with the same flags as SGLang.
        assert argv[0] == sys.executable and argv[1].endswith("files/sglang_emulator")
        assert _flag(argv, "--port") == str(ports[mode])
        for flag, value in SHARED.items():  # fairness: every capacity setting rendered, same value
            assert _flag(argv, flag) == value, f"{mode}: {flag}"
        assert _flag(argv, "--speculative-algorithm") == algorithm
        assert fact["settings"] == {"tp_size": 1, "mem_fraction_static": 0.88, "max_running_requests": 256,
                                    "context_length": 32768, "cuda_graph_max_bs": 256, "chunked_prefill_size": 8192}
        assert fact["confounders"] == []
        assert fact["mode"] == mode and fact["engine"] == "emulator"
        assert fact["version"] == "0.5.23+specbench-emulator"
        assert fact["server_info"]["port"] == ports[mode]
        # The server reports resolved values: SGLang turns NEXTN into EAGLE.
        assert fact["server_info"]["speculative_algorithm"] == ("EAGLE" if algorithm == "NEXTN" else algorithm)
        assert fact["server_info"]["max_running_requests"] == 256
        # The post-launch check ran on /server_info and found the mode's speculative settings running.
        assert fact["post_launch_check"]["ok"] and fact["info_path"] == "/server_info", fact["post_launch_check"]
        assert fact["base_url"] == f"http://127.0.0.1:{ports[mode]}"
        assert fact["unit"] is None and fact["launcher"] == "session"
        # Its own process group, recorded for the teardown, and still serving.
        leader = proc_table.read_proc(fact["pid"])
        assert leader is not None and leader.starttime == fact["starttime"]
        assert fact["pgid"] == fact["pid"] == leader.pgid == leader.sid
        # Detached: not in the process tree of the run that launched it (the teardown never
        # signals the controller's tree).
        assert fact["pid"] not in proc_table.descendants(os.getpid(), proc_table.snapshot())
        with urllib.request.urlopen(fact["base_url"] + "/health_generate", timeout=30) as resp:
            assert resp.status == 200
        assert "The server is fired up" in open(fact["log_path"]).read()
    adaptive = json.loads((node_dir / "facts" / "eagle3-adaptive.json").read_text())
    assert "--speculative-adaptive" in adaptive["command"]
    trio = [_flag(adaptive["command"], f"--speculative-{k}") for k in ("num-steps", "eagle-topk", "num-draft-tokens")]
    assert trio == ["3", "1", "4"]
    assert "--speculative-adaptive-config" not in adaptive["command"]  # SGLang's default table
    assert "--speculative-draft-model-path" not in json.loads(
        (node_dir / "facts" / "ngram.json").read_text())["command"]


def test_refusals_name_the_problem_and_the_fix_before_anything_launches(tmp_path, node_dir):
    port, busy_port, adaptive_port, override_port = (free_port() for _unused in range(4))
    (node_dir / "cases").mkdir()
    holder = socket.socket()
    holder.bind(("127.0.0.1", busy_port))
    holder.listen()
    cases = {
        "unknown_mode": {"vars": {"mode": "eagle4"}},
        "fairness_extra_args": {"vars": {"mode": "eagle3",
                                         "sglang_server_extra_args": ["--mem-fraction-static", "0.7"]}},
        "fairness_unset": {"vars": {"mode": "baseline", "sglang_server_max_running_requests": None},
                           "tasks_from": "preflight"},
        "partial_trio": {"vars": {"mode": "eagle3", "sglang_server_speculative_num_steps": 3},
                         "tasks_from": "preflight"},
        "unknown_flag": {"vars": {"mode": "eagle3",
                                  "sglang_server_cuda_graph_max_bs_flag": "--cuda-graph-max-bs"}},
        "port_in_use": {"vars": {"mode": "baseline", "sglang_server_port": busy_port}},
        "exits_during_startup": {"vars": {"mode": "baseline", "sglang_server_emulator_faults": ["fail-start"],
                                          "sglang_server_ready_timeout": 600}},
        "check_mode": {"vars": {"mode": "eagle3"}, "check": True},
        # SGLang turns adaptive off at top-k != 1 with a log warning only: the mode fails by name.
        # each launch on its own port keeps its own record (state/servers/<port>.json)
        "adaptive_turned_off": {"vars": {
            "mode": "eagle3-adaptive", "sglang_server_port": adaptive_port,
            "sglang_server_mode_extra_args": {"eagle3-adaptive": ["--speculative-eagle-topk", "4"]}}},
        "override_recorded": {"vars": {"mode": "eagle3", "sglang_server_port": override_port,
                                       "sglang_server_mode_overrides": {"eagle3": {"mem_fraction_static": 0.8}}}},
    }
    try:
        run = run_playbook(tmp_path, cases_playbook(tmp_path / "cases.yml", cases),
                           localhost_inventory(**emulator_vars(node_dir, port)))
    finally:
        holder.close()
    assert run.rc == 0, run.stdout[-4000:]
    out = case_outcomes(node_dir)
    assert set(out) == set(cases)

    def refused(name, *needles, task="Render the launch command"):
        assert out[name]["failed"], f"{name} was not refused"
        assert task in out[name]["task"], out[name]
        for needle in needles:
            assert needle in out[name]["msg"], f"{name}: {needle!r} not in {out[name]['msg']!r}"

    refused("unknown_mode", "eagle4", "baseline, eagle3, eagle, nextn, ngram, standalone, eagle3-adaptive",
            task="Check the mode")
    refused("fairness_extra_args", "--mem-fraction-static", "mem_fraction_static",
            "sglang_server_mem_fraction_static", "sglang_server_mode_overrides")
    refused("fairness_unset", "sglang_server_max_running_requests is not set", "48")
    refused("partial_trio", "sglang_server_speculative_eagle_topk", task="Check the speculative parameters")
    refused("unknown_flag", "--cuda-graph-max-bs is not a flag of SGLang 0.5.23",
            "renamed to --cuda-graph-max-bs-decode in SGLang 0.5.20", "sglang_server_cuda_graph_max_bs",
            task="Check every flag")
    refused("port_in_use", f"port {busy_port}", f"pid {os.getpid()}", "sglang_server_port",
            task="Start the server")
    refused("exits_during_startup", "exited during startup", "CUDA out of memory", task="Wait for readiness")
    refused("adaptive_turned_off", "mode eagle3-adaptive is not running as asked",
            "speculative_adaptive: asked True, the server runs False",
            "speculative_adaptive disabled: speculative_eagle_topk=4 (only topk=1 is supported)",
            task="Wait for readiness")
    assert "not ready within" not in out["exits_during_startup"]["msg"]
    # Nothing launched by the refused cases, nor in check mode: the only records are the server that
    # died at startup, the override case's and the adaptive case's (launched, then failed by the check).
    assert not out["check_mode"]["failed"] and out["check_mode"]["fact"] is None
    records = node_dir / "state" / "servers"
    launched = (port, adaptive_port, override_port)
    assert sorted(p.name for p in records.glob("*.json")) == sorted(f"{p}.json" for p in launched)
    assert not list((node_dir / "state").glob("*.json"))  # no shared record besides them
    # The mismatch is on record for the teardown and the results.
    assert not json.loads((records / f"{adaptive_port}.json").read_text())["post_launch_check"]["ok"]
    died = json.loads((records / f"{port}.json").read_text())
    assert "--emulator-fault" in died["command"] and not proc_table.alive(died["pid"], died["starttime"])
    # A per-mode override asked for by name is applied and recorded as a confounder.
    fact = out["override_recorded"]["fact"]
    assert not out["override_recorded"]["failed"]
    assert _flag(fact["command"], "--mem-fraction-static") == "0.8"
    assert fact["settings"]["mem_fraction_static"] == 0.8
    assert any("mem_fraction_static" in c and "0.88" in c for c in fact["confounders"])


def test_the_flag_check_runs_once_per_command_and_host(tmp_path, node_dir):
    """bench.yml's preflight play checks the flags (on a real node that imports SGLang, minutes);
    the launch in the next play reuses that check instead of importing again. Another mode is
    another command: checked anew."""
    playbook = tmp_path / "preflight_then_launch.yml"
    preflight = {"name": "specbench.core.sglang_server", "tasks_from": "preflight"}
    playbook.write_text(json.dumps([
        {"name": "Test | Check before anything runs, as bench.yml does", "hosts": "localhost", "gather_facts": False,
         "tasks": [{"name": "Test | Preflight", "ansible.builtin.include_role": preflight}]},
        {"name": "Test | Launch, then check another mode", "hosts": "localhost", "gather_facts": False,
         "tasks": [{"name": "Test | Launch", "ansible.builtin.include_role": {"name": "specbench.core.sglang_server"}},
                   {"name": "Test | Preflight eagle3", "ansible.builtin.include_role": preflight,
                    "vars": {"mode": "eagle3"}}]},
    ]))
    port = free_port()
    run = run_playbook(tmp_path, playbook, localhost_inventory(**emulator_vars(node_dir, port), mode="baseline"))
    assert run.rc == 0, run.stdout[-4000:]
    checks = [res for _unused, task, res in run.results("runner_on_ok")
              if task.endswith("Check every flag against the node's SGLang") and "checked" in res]
    assert [c["checked"] for c in checks] == [True, True], checks
    assert "--speculative-algorithm" not in checks[0]["flags"] and "--speculative-algorithm" in checks[1]["flags"]
    reused = [task for _unused, task, _unused in run.results("runner_on_skipped") if "Check every flag" in task]
    assert len(reused) == 2, "the launch's own preflight and its late check both reused the first check"
    assert json.loads((node_dir / "state" / "servers" / f"{port}.json").read_text())["mode"] == "baseline"

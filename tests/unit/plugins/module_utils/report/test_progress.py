"""The plan's estimate and the live progress lines (module_utils/report/progress.py), the workers'
progress files (specbench_client.worker) and the load's phase read from a server's log line
(launch/process.load_phase). The end-to-end run is tests/compare/test_progress_runs.py."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.specbench.core.plugins.module_utils.launch.process import load_phase, progress_line
from ansible_collections.specbench.core.plugins.module_utils.report import progress as live


@pytest.mark.parametrize("value", [4.9, 0, -1, "ten", None, 601])
def test_an_interval_out_of_range_names_the_variable_and_the_range(value):
    with pytest.raises(live.ProgressError, match=r"bench_progress_interval_s=.*from 5 .* to 600, e\.g\. 10"):
        live.check_interval(value)


def test_interval_in_range():
    assert live.check_interval("10") == 10.0
    assert live.check_interval(5) == 5.0


def test_worker_totals_sum_the_workers_and_skip_half_lines():
    text = ('{"worker": 0, "ok": 5, "failed": 1, "tokens": 640, "window": false}\n'
            '{"worker": 1, "ok": 7, "failed": 0, "tokens": 900, "window": true}\n{"worker": 2, "ok"\n')
    assert live.worker_totals(text) == {"ok": 12, "failed": 1, "tokens": 1540, "window": True, "workers": 2}
    assert live.worker_totals("") is None


def write_result(folder, run, host, name, engine, ready_s, started):
    path = folder / run / host / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"engine": engine, "started_at": started, "server": {"ready_s": ready_s}}))


def test_plan_reads_the_nodes_last_launches_else_states_its_default(tmp_path):
    settings = {"warmup_s": 30, "window_s": 60, "repeats": 1}
    launches = [{"mode": "baseline", "launch": 1, "levels": [1, 2, 5]}, {"mode": "eagle3", "launch": 1, "levels": [1, 2, 5]}]
    fresh = live.plan("node1", "vllm", launches, settings, str(tmp_path), "now")
    assert fresh["load_s"] == 120 and "stated default of 120 s" in fresh["estimated_how"]
    assert fresh["expected_s"] == 2 * (120 + live.LAUNCH_OVERHEAD_S + 3 * (90 + live.LEVEL_OVERHEAD_S))
    for i, ready in enumerate([200, 100, 300]):
        write_result(tmp_path, f"r{i}", "node1", "baseline", "vllm", ready, f"2026-01-0{i + 1}T00:00:00Z")
    write_result(tmp_path, "r9", "node2", "baseline", "vllm", 5000, "2026-01-09T00:00:00Z")  # another node
    write_result(tmp_path, "r8", "node1", "baseline", "sglang", 5000, "2026-01-09T00:00:00Z")  # another engine
    write_result(tmp_path, "now", "node1", "baseline", "vllm", 5000, "2026-01-10T00:00:00Z")  # this run's own
    known = live.plan("node1", "vllm", launches, settings, str(tmp_path), "now")
    assert known["load_s"] == 200 and "median of the node's last 3 vllm launches" in known["estimated_how"]
    lines = live.plan_lines(known, {"playbook": "compare", "hosts": ["node1"], "modes": ["baseline", "eagle3"],
                                    "warmup_s": 30, "window_s": 60, "interval_s": 10, "budget": "no added rounds"})
    assert lines[0] == ("node1 | plan | compare: hosts node1; modes baseline, eagle3; warm-up 30 s, window 60 s; "
                        "progress every 10 s")
    assert lines[2].startswith("node1 | plan | launch 1/2: baseline (its launch 1), levels [1, 2, 5], about 8m")
    assert live.remaining_after(known, 1) == known["launches"][1]["expected_s"]
    assert live.remaining_after(known, 2) == 0


def test_progress_line_names_launch_level_counts_rate_and_etas():
    rec = live.progress_record("node1", "eagle3", 2, 4, 3, 8, 10, "window",
                               {"ok": 120, "failed": 2, "tokens": 6000, "window": True, "workers": 1},
                               level_elapsed=60, level_expected=93, run_started=1000.0, run_remaining=600,
                               now=1000.0 + 1234)
    assert rec["line"] == ("node1 | progress | launch 2/4 eagle3 | level 3/8 C=10 window | requests 120 done, "
                           "2 failed | 100.0 tok/s so far (client, wall-clock) | level 1m00s, ETA 33s | "
                           "run 20m34s, ETA 18m18s")
    assert rec["run_eta_s"] == 33 + 5 * 93 + 600
    quiet = live.progress_record("node1", "baseline", None, None, 1, 1, 1, "warm-up", None, 2, 10, None, 0, 5.0)
    assert "launch baseline" in quiet["line"] and "requests - (no progress from the client yet)" in quiet["line"]


def test_append_record_is_one_line_each(tmp_path):
    live.append_record(str(tmp_path / "run"), {"event": "a"})
    live.append_record(str(tmp_path / "run"), {"event": "b"})
    lines = (tmp_path / "run" / "progress.jsonl").read_text().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["a", "b"]


@pytest.mark.parametrize(("line", "phase"), [
    ("[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=94.97 GB", "loading the weights"),
    ("Loading safetensors checkpoint shards:  45% Completed | 27/61 [01:10<01:30]", "loading the weights"),
    ("[2026-01-01 TP0] Load weight end. type=DeepseekV3, dtype=torch.bfloat16", "weights loaded"),
    ("[2026-01-01 TP0] KV Cache is allocated. #tokens: 812345, KV size: 40.1 GB", "allocating the KV cache"),
    ("Capture cuda graph begin. This can take up to several minutes.", "capturing CUDA graphs"),
    ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67", "capturing CUDA graphs"),
    ("INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)", "starting the HTTP server"),
    ("something else", None),
])
def test_load_phase_from_the_servers_log(line, phase):
    assert load_phase(line) == phase


def test_load_line_says_what_the_server_does():
    line = progress_line({"elapsed_s": 75, "timeout_s": 1800, "gpu_memory": {"error": "no GPUs"},
                          "log_line": "Capture cuda graph begin."})
    assert line.startswith("loading 1:15 of 30:00 | capturing CUDA graphs (the server's log) | GPU memory unknown")


def test_worker_writes_its_progress_file(tmp_path):
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client.worker import Worker

    worker = Worker.__new__(Worker)  # only the progress writer's fields
    worker.progress_path, worker.widx, worker.ok, worker.failed, worker.whole_tokens = str(tmp_path / "p"), 3, 4, 1, 99
    worker.ws, worker.we, worker.min_ws, worker.count_mode = 10.0, 70.0, 8.0, False
    worker.ok_seconds, worker.drain, worker.stopping, worker.streams = 30.0, True, False, {}
    worker.settings = {"_repeat": 1, "repeats": 3}  # the second of the level's three repeats (level.run_level)
    worker._write_progress(11.0)
    rec = json.loads((tmp_path / "p.w3").read_text())
    assert (rec["ok"], rec["failed"], rec["tokens"], rec["window"]) == (4, 1, 99, True)
    assert (rec["repeat"], rec["repeats"]) == (1, 3)
    # No request in flight: the drain expected is a mean answered request (30 s over 4).
    assert rec["window_left_s"] == 59.0 and rec["drain_s"] == 7.5 and "warmup_left_s" not in rec
    assert not os.path.exists(tmp_path / "p.w3.tmp")
    worker.ws, worker.we = None, float("inf")  # still warming up: the warm-up's minimum left
    worker._write_progress(5.5)
    rec = json.loads((tmp_path / "p.w3").read_text())
    assert rec["window"] is False and rec["warmup_left_s"] == 2.5 and "window_left_s" not in rec
    worker.ws, worker.count_mode = 10.0, True  # a window closed by a request count: no seconds left to say
    worker._write_progress(12.0)
    assert "window_left_s" not in json.loads((tmp_path / "p.w3").read_text())

    class Flight:  # a request in flight after the window: 100 of 400 tokens in its 2 s, one with none yet
        def __init__(self, t_send, ks):
            self.t_send, self.ks, self.expect = t_send, ks, 400

    worker.stopping, worker.count_mode, worker.we = True, False, 70.0
    worker.streams = {0: type("S", (), {"req": Flight(78.0, [60, 40])})(), 1: type("S", (), {"req": None})(),
                      2: type("S", (), {"req": Flight(79.5, [])})()}
    worker._write_progress(80.0)
    rec = json.loads((tmp_path / "p.w3").read_text())
    # 300 tokens left at 50 tok/s (6 s, of a whole 8 s); the other 7.5 s less its 0.5 s gone: the longest.
    assert rec["window_left_s"] == 0.0 and rec["drain_left_s"] == 7.0 and rec["drain_s"] == 8.0


def test_the_level_eta_reads_the_workers_clock_not_only_the_plan():
    # The window open, 42 s left on the node: that, plus the summary's tail, whatever the plan said.
    assert live.level_eta_s({"window_left_s": 42.0}, level_elapsed=200, level_expected=93, window_s=60) == 43.0
    # Warming up past the plan's level time (streams waiting for long requests): the window still to come.
    assert live.level_eta_s({"warmup_left_s": 0.0}, level_elapsed=120, level_expected=93, window_s=60) == 61.0
    assert live.level_eta_s({"warmup_left_s": 12.5}, level_elapsed=5, level_expected=93, window_s=60) == 73.5
    # The drain expected after the window (a mean request), then once the window is over, the drain left.
    assert live.level_eta_s({"window_left_s": 42.0, "drain_s": 8.0}, 200, 93, 60) == 51.0
    assert live.level_eta_s({"warmup_left_s": 1.0, "drain_s": 8.0}, 3, 93, 60) == 70.0
    assert live.level_eta_s({"window_left_s": 0.0, "drain_s": 8.0, "drain_left_s": 3.0}, 200, 93, 60) == 4.0
    # Nothing from the workers yet: the plan's time left, never less than the window.
    assert live.level_eta_s(None, level_elapsed=10, level_expected=93, window_s=60) == 83.0
    assert live.level_eta_s(None, level_elapsed=50, level_expected=93, window_s=60) == 61.0
    # bench_repeats 3 (level 3 x (10 s warm-up + 20 s window) + 3 s): in the first repeat's window, 5 s left, then
    # two more repeats of 30 s and their 2-s drains; in the last one, only its own time.
    assert live.level_eta_s({"window_left_s": 5.0, "drain_s": 2.0, "repeat": 0, "repeats": 3}, 20, 93, 20) == 72.0
    assert live.level_eta_s({"window_left_s": 5.0, "drain_s": 2.0, "repeat": 2, "repeats": 3}, 80, 93, 20) == 8.0
    assert live.worker_totals('{"worker": 0, "ok": 1, "failed": 0, "tokens": 9, "window": true, "repeat": 1, '
                              '"repeats": 3, "window_left_s": 4.0}\n')["repeat"] == 1
    text = ('{"worker": 0, "ok": 1, "failed": 0, "tokens": 9, "window": true, "window_left_s": 4.0}\n'
            '{"worker": 1, "ok": 1, "failed": 0, "tokens": 9, "window": false, "warmup_left_s": 0.0}\n')
    totals = live.worker_totals(text)
    assert totals["window_left_s"] == 4.0 and "warmup_left_s" not in totals


# -- the run's state and its attempts (resume) ----------------------------------------------------
FP = {"modes": ["baseline", "eagle3"], "levels": [1, 4]}


def test_a_new_run_is_attempt_one_and_says_how_to_resume(tmp_path):
    state = live.start_attempt(str(tmp_path / "r1"), "r1", "compare", FP, resume=False)
    assert state["status"] == "running" and [a["attempt"] for a in state["attempts"]] == [1]
    assert "ansible-playbook playbooks/compare.yml -e run_id=r1 -e resume=true" in state["message"]
    message = live.mark_incomplete(str(tmp_path / "r1"), "SIGINT during eagle3 on node1")
    assert message.startswith("Run r1 is incomplete (SIGINT during eagle3 on node1): every level measured is kept")
    assert live.read_run_state(str(tmp_path / "r1"))["status"] == "incomplete"


def test_resume_is_the_next_attempt_of_identical_settings(tmp_path):
    run_dir = str(tmp_path / "r1")
    live.start_attempt(run_dir, "r1", "compare", FP, resume=False)
    live.mark_incomplete(run_dir, "SIGTERM")
    state = live.start_attempt(run_dir, "r1", "compare", FP, resume=True)
    assert [a["attempt"] for a in state["attempts"]] == [1, 2] and live.current_attempt(run_dir) == 2
    assert state["resumed_from"] == "incomplete" and state["attempts"][0]["ended"] == "SIGTERM"
    # A run killed outright (still "running": an AWX cancel's SIGKILL) resumes too, saying so.
    state = live.start_attempt(run_dir, "r1", "compare", FP, resume=True)
    assert len(state["attempts"]) == 3 and state["resumed_from"] == "running"
    assert state["attempts"][1]["ended"].startswith("stopped outright (no word from it: an AWX cancel")
    live.mark_complete(run_dir)
    assert live.read_run_state(run_dir)["status"] == "complete"


@pytest.mark.parametrize(("setup", "fingerprint", "resume", "error"), [
    (None, FP, True, r"holds no run to resume \(run-state.json is missing\)"),
    ("complete", FP, True, r"run r1 is complete: nothing is missing"),
    ("incomplete", {"modes": ["baseline", "eagle3"], "levels": [1, 8]}, True, r"other settings \(levels differ\)"),
    ("incomplete", FP, False, r"incomplete \(interrupted\): resume it with -e resume=true"),
])
def test_resume_refusals_name_the_problem_and_the_fix(tmp_path, setup, fingerprint, resume, error):
    run_dir = str(tmp_path / "r1")
    if setup:
        live.start_attempt(run_dir, "r1", "compare", FP, resume=False)
        (live.mark_complete if setup == "complete" else lambda d: live.mark_incomplete(d, "SIGINT"))(run_dir)
    with pytest.raises(live.ProgressError, match=error):
        live.start_attempt(run_dir, "r1", "compare", fingerprint, resume=resume)


def test_attempts_name_each_files_levels_only_for_a_resumed_run():
    first = {"baseline": [("", {"_path": "/r/n/baseline.json", "levels": [{"concurrency": 1}, {"concurrency": 4}]})]}
    assert live.attempts_of(first) == []
    resumed = dict(first, eagle3=[("", {"_path": "/r/n/eagle3.json",
                                        "levels": [{"concurrency": 1, "attempt": 1}, {"concurrency": 4, "attempt": 2}]})])
    lines = live.attempts_lines(live.attempts_of(resumed))
    assert lines[0] == "## Attempts"
    assert "- `baseline.json` (baseline): attempt 1: C=1, C=4" in lines
    assert "- `eagle3.json` (eagle3): attempt 1: C=1; attempt 2: C=4" in lines

"""The plan and the live progress of a real compare run on the emulator, through ansible-runner:
the plan printed before the first launch, a progress line every bench_progress_interval_s while a
level runs, in the playbook's output, in the runner's job events and in progress.jsonl."""

from __future__ import annotations

import json

import pytest
from compare_kit import RUN_TIMEOUT_S, node_vars, run_playbook
from specbench_testkit import free_port, inventory, kill_node_servers, shared_run

LEVELS = [1, 4]
WINDOW_S = 6  # longer than the 5-s progress interval: every level prints at least one live line


def progress_run(tmp_path_factory):
    def build(tmp):
        node = tmp / "node"
        host = node_vars(node, free_port(), time_scale=0.25, bench_concurrency=LEVELS, bench_warmup_s=1,
                         bench_window_s=WINDOW_S, bench_progress_interval_s=5)
        try:
            return run_playbook(tmp, "playbooks/compare.yml", inventory({"node1": host}),
                                extravars={"results_dir": str(tmp / "results"), "run_id": "live"},
                                timeout=RUN_TIMEOUT_S)
        finally:
            kill_node_servers(node)

    return shared_run(tmp_path_factory, "compare-progress", build)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    found, tmp = progress_run(tmp_path_factory)
    assert found.rc == 0, found.stdout[-4000:]
    records = [json.loads(line) for line in (tmp / "results" / "live" / "progress.jsonl").read_text().splitlines()]
    return found, records


def test_plan_printed_before_the_first_launch(run):
    found, records = run
    plan = found.task("Print the plan")
    assert [r["mode"] for r in plan["plan"]["launches"]] == ["baseline", "eagle3"]
    assert all(r["levels"] == LEVELS for r in plan["plan"]["launches"])
    assert "stated default" in plan["plan"]["estimated_how"]  # a new node: no launch on record
    stdout = found.stdout
    assert "node1 | plan | compare: hosts node1; modes baseline, eagle3; warm-up 1 s, window 6 s" in stdout
    assert "node1 | plan | launch 1/2: baseline (its launch 1), levels [1, 4]" in stdout
    assert "node1 | plan | expected wall time about" in stdout
    assert stdout.index("| plan | expected wall time") < stdout.index("| progress |")
    assert records[0]["event"] == "plan" and records[0]["plan"]["expected_s"] > 0
    # Each launch's model load: its lines in progress.jsonl too, ending ready.
    loads = [r for r in records if r["event"] == "load"]
    assert [r["mode"] for r in loads if r["ready"]] == ["baseline", "eagle3"]
    assert all(r["line"] in stdout for r in loads)


def test_live_lines_in_output_events_and_jsonl(run):
    found, records = run
    live = [r for r in records if r["event"] == "level_progress"]
    done = [r for r in records if r["event"] == "level_done"]
    # Every level of both launches printed at least one live line, and its closing line.
    assert {(r["launch"], r["concurrency"]) for r in live} == {(1, 1), (1, 4), (2, 1), (2, 4)}
    assert [(r["mode"], r["concurrency"]) for r in done] == [("baseline", 1), ("baseline", 4), ("eagle3", 1),
                                                            ("eagle3", 4)]
    elapsed = [r["run_elapsed_s"] for r in records if r.get("run_elapsed_s") is not None]
    assert len(elapsed) == len(records) - 1 and elapsed == sorted(elapsed)  # every record but the plan
    for rec in live:
        assert rec["launches"] == 2 and rec["levels"] == 2 and rec["level_eta_s"] >= 0 and rec["run_eta_s"] >= 0
        assert rec["requests_ok"] is not None and rec["requests_failed"] == 0
        assert rec["line"].startswith(f"node1 | progress | launch {rec['launch']}/2 {rec['mode']} | "
                                      f"level {rec['level']}/2 C={rec['concurrency']}")
        assert rec["line"] in found.stdout
    # Requests counted while the level ran: the last live line of each level has some, and tok/s.
    assert all(r["requests_ok"] > 0 and r["output_tok_per_s_so_far"] > 0 for r in live if r["phase"] == "window")
    assert any(r["phase"] == "window" for r in live)
    # The job events AWX shows live carry the same lines (display output: ansible-runner's verbose events).
    event_text = [ev.get("stdout", "") for ev in found.events]
    for rec in live + done:
        assert any(rec["line"] in text for text in event_text), rec["line"]

"""The plan and the live progress of a real compare run on the emulator, through ansible-runner:
the plan printed before the first launch, a progress line every bench_progress_interval_s while a
level runs, in the playbook's output, in the runner's job events and in progress.jsonl."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import markupsafe
import pytest
from compare_kit import RUN_TIMEOUT_S, node_vars, run_playbook
from specbench_testkit import (
    PlaybookRun,
    alive,
    command_line,
    free_port,
    inventory,
    kill_node_servers,
    shared_run,
    start_playbook,
    starttime,
)

LEVELS = [1, 4]
WINDOW_S = 6  # longer than the 5-s progress interval: every level prints at least one live line


def node1(node: Path, **more) -> dict:
    """The one emulated host of these runs: modes baseline and eagle3 at LEVELS, short levels."""
    return node_vars(node, free_port(), time_scale=0.25, bench_concurrency=LEVELS, bench_warmup_s=1, **more)


def node_run(tmp_path_factory, name: str, build):
    """shared_run of ``build(tmp, node)`` (a PlaybookRun) on an emulated node in ``tmp / "node"``, every server
    the node recorded killed after it, whatever happened."""

    def on_node(tmp):
        node = tmp / "node"
        try:
            return build(tmp, node)
        finally:
            kill_node_servers(node)

    return shared_run(tmp_path_factory, name, on_node)


def progress_run(tmp_path_factory):
    def build(tmp, node):
        host = node1(node, bench_window_s=WINDOW_S, bench_progress_interval_s=5)
        return run_playbook(tmp, "playbooks/compare.yml", inventory({"node1": host}),
                            extravars={"results_dir": str(tmp / "results"), "run_id": "live"},
                            timeout=RUN_TIMEOUT_S)

    return node_run(tmp_path_factory, "compare-progress", build)


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


def test_the_runs_html_report_shows_the_recommendation_once_in_a_browser(browser, run):
    """report.html of this run in headless Chromium: the verdict's card first, holding report.md's Verdict
    section, the recommendation shown once (report_browser's checker), no console line, every plot shown."""
    import report_browser

    found, unused_records = run
    page = Path(found.extravars["results_dir"]) / "live" / "node1" / "report.html"
    seen = report_browser.check_page(page, report_browser.ARTIFACTS / "check-progress-run")
    assert not seen["console"] and not seen["problems"], seen
    assert seen["sections"][:2] == ["verdict", "plots"] and len(seen["images"]) >= 5, seen
    summary = json.loads((page.parent / "summary.json").read_text())
    assert page.read_text().count(str(markupsafe.escape(summary["recommendation"]))) == 1


# ---------------------------------------------------------------------------------------------
# serve.yml on this run: its plan first, its progress in the host's serve folder
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def serve_run(tmp_path_factory, run):
    found, unused_records = run
    compared = Path(found.extravars["results_dir"]) / "live"

    def build(tmp, node):
        # The run copied: serve.yml writes serve.json and re-renders the report in its own copy.
        shutil.copytree(compared, tmp / "results" / "live")
        host = node1(node, bench_window_s=WINDOW_S, bench_progress_interval_s=5)
        # serve.yml's default (the suite pins it off): the proof's references measured again, launches of their own.
        return run_playbook(tmp, "playbooks/serve.yml", inventory({"node1": host}),
                            extravars={"results_dir": str(tmp / "results"), "run_id": "live",
                                       "serve_measure_references": True},
                            timeout=RUN_TIMEOUT_S)

    served, tmp = node_run(tmp_path_factory, "serve-progress", build)
    return served, tmp / "results" / "live", compared


def test_serve_prints_its_plan_first_and_keeps_its_progress_in_the_hosts_serve_folder(serve_run):
    served, run_dir, compared = serve_run
    stdout = served.stdout
    plan = served.task("Print the plan and its expected wall time")
    rows = plan["plan"]["launches"]
    # The references measured again, each a launch at the run's levels, then the served configuration.
    assert [r["levels"] for r in rows] == [LEVELS] * len(rows) and rows[-1]["mode"].endswith("(served)"), rows
    assert all(r["mode"].endswith("(reference, measured again)") for r in rows[:-1]) and len(rows) >= 2, rows
    assert "node1 | plan | serve: hosts node1; modes" in stdout and "warm-up 1 s, window 6 s" in stdout
    serves = next(line for line in stdout.splitlines() if line.startswith("node1 | plan | serves run live's "))
    assert "the proof at C=1, C=4 against 1: " in serves and "launched as a lasting service" in serves, serves
    assert "measured again just before the launch (serve_measure_references)" in serves
    assert "node1 | plan | after the planned launches: should the proof find it clearly slower somewhere" in stdout
    # The model load estimated from the run's own launches on this node (the compare's two).
    assert "median of the node's last 2 emulator launches on record" in plan["plan"]["estimated_how"], plan["plan"]
    assert stdout.index("| plan | expected wall time") < stdout.index("| ready after")  # before any launch
    # One progress.jsonl for serve.yml: the host's serve folder (plan, loads, the references' and proof's levels);
    # the compare run's own file untouched, no other.
    records = [json.loads(line) for line in (run_dir / "node1" / "serve" / "progress.jsonl").read_text().splitlines()]
    events = [r["event"] for r in records]
    assert events[0] == "plan" and events.count("load") >= len(rows) and "level_progress" in events, events
    assert [r["concurrency"] for r in records if r["event"] == "level_done"] == LEVELS * len(rows)
    assert (run_dir / "progress.jsonl").read_text() == (compared / "progress.jsonl").read_text()
    assert sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("progress.jsonl")) == [
        "node1/serve/progress.jsonl", "progress.jsonl"]
    # The served launch's lines name it as the plan's last launch.
    last = [r for r in records if r["event"] == "level_progress"][-1]
    assert (last["launch"], last["launches"]) == (len(rows), len(rows)), last
    assert served.rc == 0 or "clearly slower" in stdout, stdout[-3000:]


# ---------------------------------------------------------------------------------------------
# The level's ETA on a level that runs past the plan's level time (its warm-up waits for long requests)
# ---------------------------------------------------------------------------------------------
ETA_WINDOW_S = 10


@pytest.fixture(scope="module")
def long_level(tmp_path_factory):
    def build(tmp, node):
        # Time scale 1 (about 90 tok/s a stream) and 768-token outputs: a request takes about 8 s, so the
        # warm-up (1 s, and until each of the 2 streams finished a request) ends well after its 1 s and the
        # level outlives the plan's 1 + 10 + 3 s. One measurement of the level (no saturated retry).
        host = node_vars(node, free_port(), time_scale=1.0, bench_concurrency=[2], bench_warmup_s=1,
                         bench_window_s=ETA_WINDOW_S, bench_output_len=768, bench_progress_interval_s=5,
                         bench_saturated_retries=0)
        return run_playbook(tmp, "playbooks/bench.yml", inventory({"node1": host}),
                            extravars={"results_dir": str(tmp / "results"), "run_id": "eta", "mode": "baseline"},
                            timeout=RUN_TIMEOUT_S)

    found, tmp = node_run(tmp_path_factory, "bench-long-level", build)
    assert found.rc == 0, found.stdout[-4000:]
    run_dir = tmp / "results" / "eta"
    records = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    return records, json.loads((run_dir / "node1" / "baseline.json").read_text())


def utc_seconds(stamp: str) -> float:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC).timestamp()


def test_the_level_eta_counts_down_to_the_levels_end(long_level):
    records, doc = long_level
    (level,) = doc["levels"]
    window_end = utc_seconds(level["window_end_utc"])
    (done,) = [r for r in records if r["event"] == "level_done"]
    ticks = [r for r in records if r["event"] == "level_progress"]
    plan = next(r for r in records if r["event"] == "plan")["plan"]
    assert len(ticks) >= 3, ticks
    # The level runs past the plan's level time (its requests in flight drain for up to 8 s after the window),
    # where the plan's time alone reads 0 s: every line before the level's end has some time left.
    assert ticks[-1]["level_elapsed_s"] > plan["level_s"], (ticks, plan)
    etas = [r["level_eta_s"] for r in ticks]
    assert all(eta > 0 for eta in etas), [r["line"] for r in ticks]
    assert all(a >= b for a, b in zip(etas, etas[1:], strict=False)) and etas[-1] < etas[0], etas  # counts down
    assert all(r["unix_s"] < done["unix_s"] for r in ticks), (ticks, done)
    assert any(r["phase"] == "draining" for r in ticks), ticks
    for rec in ticks:
        if rec["phase"] == "warm-up":  # the window still to come: at least its length
            assert rec["level_eta_s"] >= ETA_WINDOW_S, rec
        elif rec["phase"] == "window":
            # The seconds to the window's end as the node's clock says, read from a file the workers rewrite
            # once a second (PROGRESS_EVERY_S) and fetched through a shell on the node (its delay is the slack),
            # plus the drain expected after it (the longest request in flight, whole: about 8.3 s here).
            left = window_end - rec["unix_s"]
            assert -0.5 <= rec["window_left_s"] - left <= 4.0, (rec, left)
            assert 6 <= rec["drain_s"] <= 12, rec
        # Never past the level's end by more than the drain's estimate, the read's delay and the tail allow.
        assert rec["level_eta_s"] >= done["unix_s"] - rec["unix_s"] - 6.0, (rec, done)
    # The run's ETA (one level, one launch) is the level's.
    assert all(r["run_eta_s"] == r["level_eta_s"] for r in ticks)


# ---------------------------------------------------------------------------------------------
# Interrupted (Ctrl-C: SIGINT to ansible-playbook) during eagle3's sweep, then resumed
# ---------------------------------------------------------------------------------------------
def playbook_processes(pdd: Path) -> dict[int, int]:
    """{pid: parent pid} of the ansible-playbook this test started and its workers (forks with its
    command line, which names the run's private folder)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "ansible-playbook" in cmd and str(pdd) in cmd:
                found[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    return found


def playbook_pid(pdd: Path, timeout: float = 60) -> int:
    """The ansible-playbook process this test started: the one whose parent is none of its workers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = playbook_processes(pdd)
        top = [pid for pid, parent in found.items() if parent not in found]
        if found and len(top) == 1:
            return top[0]
        time.sleep(0.2)
    raise AssertionError("ansible-playbook did not start")


def wait_workers_gone(pdd: Path, timeout: float = 60) -> None:
    """ansible-playbook exits on Ctrl-C without waiting for its workers (they run in their own sessions,
    ansible/executor/process/worker.py): the sweep's worker writes the interrupted file after that."""
    deadline = time.monotonic() + timeout
    while playbook_processes(pdd):
        assert time.monotonic() < deadline, f"ansible-playbook's workers still run {timeout} s after it exited"
        time.sleep(0.2)


def wait_keeper_gone(node: Path, timeout: float = 60) -> None:
    """The node lock's keeper removes node.lock.json as it exits (after stopping what a killed run left)."""
    deadline = time.monotonic() + timeout
    while (node / "node.lock.json").exists():
        assert time.monotonic() < deadline, f"the node lock's keeper still runs {timeout} s after the run"
        time.sleep(0.2)


def wait_levels(path: Path, count: int, thread, timeout: float = 400) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and thread.is_alive():
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = {}
        if len(doc.get("levels") or []) >= count:
            return doc
        time.sleep(0.2)
    raise AssertionError(f"{path} did not reach {count} levels")


def interrupted_run(tmp_path_factory):
    def build(tmp, node):
        host = node1(node, bench_window_s=3)
        extravars = {"results_dir": str(tmp / "results"), "run_id": "cut"}
        host_dir = tmp / "results" / "cut" / "node1"
        thread, runner, pdd = start_playbook(tmp, "playbooks/compare.yml", inventory({"node1": host}), extravars,
                                             home=tmp / "home", name="runner-cut", timeout=RUN_TIMEOUT_S)
        pid = playbook_pid(pdd)
        wait_levels(host_dir / "eagle3.json", 1, thread)
        os.kill(pid, signal.SIGINT)  # Ctrl-C, during eagle3's second level
        thread.join(120)
        assert not thread.is_alive(), "ansible-playbook went on after SIGINT"
        wait_workers_gone(pdd)
        cut = PlaybookRun.of(runner, pdd, extravars)
        kept = {name: json.loads((host_dir / f"{name}.json").read_text()) for name in ("baseline", "eagle3")}
        state = json.loads((tmp / "results" / "cut" / "run-state.json").read_text())
        (tmp / "cut.json").write_text(json.dumps({"rc": cut.rc, "status": cut.status, "stdout": cut.stdout,
                                                  "kept": kept, "state": state}))
        return run_playbook(tmp, "playbooks/compare.yml", inventory({"node1": host}),
                            dict(extravars, resume=True), timeout=RUN_TIMEOUT_S)

    return node_run(tmp_path_factory, "compare-interrupted", build)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    found, tmp = interrupted_run(tmp_path_factory)
    return found, json.loads((tmp / "cut.json").read_text()), tmp / "results" / "cut"


def test_an_interrupted_run_keeps_its_levels_and_says_how_to_resume(resumed):
    unused_found, cut, unused_run_dir = resumed
    assert cut["rc"] != 0
    assert cut["kept"]["baseline"]["status"] == "complete"
    assert [lv["concurrency"] for lv in cut["kept"]["baseline"]["levels"]] == LEVELS
    eagle3 = cut["kept"]["eagle3"]
    assert eagle3["status"] == "interrupted" and [lv["concurrency"] for lv in eagle3["levels"]] == [1]
    # Ctrl-C reaches the worker as SIGINT (ansible-playbook forwards it), or as the SIGTERM of its cleanup.
    assert re.match(r"interrupted by SIG(INT|TERM) after 1 of 2 levels", eagle3["error"]), eagle3["error"]
    state = cut["state"]
    assert state["status"] == "incomplete"
    assert "ansible-playbook playbooks/compare.yml -e run_id=cut -e resume=true" in state["message"]
    # The plan said it before the first launch, where an AWX cancel (a SIGKILL to the group) leaves no other word.
    assert "-e run_id=cut -e resume=true resumes it" in cut["stdout"]


def test_the_resumed_run_measures_only_what_is_missing_and_names_the_attempts(resumed, run):
    found, cut, run_dir = resumed
    assert found.rc == 0, found.stdout[-4000:]
    assert "resuming run cut, attempt 2" in found.stdout
    baseline = json.loads((run_dir / "node1" / "baseline.json").read_text())
    eagle3 = json.loads((run_dir / "node1" / "eagle3.json").read_text())
    assert baseline["started_at"] == cut["kept"]["baseline"]["started_at"]  # kept: not launched again
    assert found.stdout.count("| ready after") == 1  # eagle3's launch only
    assert eagle3["status"] == "complete"
    assert [(lv["concurrency"], lv["attempt"]) for lv in eagle3["levels"]] == [(1, 1), (4, 2)]
    assert eagle3["levels"][0] == dict(cut["kept"]["eagle3"]["levels"][0], attempt=1)
    assert json.loads((run_dir / "run-state.json").read_text())["status"] == "complete"
    # The report: the sections and levels of an uninterrupted run's (test_progress_runs's run), plus its attempts.
    report = (run_dir / "node1" / "report.md").read_text()
    whole, unused_records = run
    whole_report = (Path(whole.extravars["results_dir"]) / "live" / "node1" / "report.md").read_text()

    def sections(text):
        # A section's count (the confounders found, e.g. a noisy level under load) is the run's, not the structure.
        return [re.sub(r" \(\d+\)$", "", line) for line in text.splitlines() if line.startswith("## ")]

    assert [s for s in sections(report) if s != "## Attempts"] == sections(whole_report)
    assert "- `eagle3.json` (eagle3): attempt 1: C=1; attempt 2: C=4" in report
    assert "- `baseline.json` (baseline): attempt 1: C=1, C=4" in report
    assert "Attempts" in (run_dir / "node1" / "report.html").read_text()


# ---------------------------------------------------------------------------------------------
# Cancelled as AWX cancels (ansible-runner's cancel_callback), then resumed
# ---------------------------------------------------------------------------------------------
def server_records(node: Path) -> list[dict]:
    """The servers the node's launches recorded (state/servers/<port>.json), each with whether it is alive."""
    found = []
    for path in sorted((node / "state" / "servers").glob("*.json")):
        rec = json.loads(path.read_text())
        pid = int(rec.get("pid") or 0)
        same = rec.get("starttime") is None or str(starttime(pid)) == str(rec.get("starttime"))
        found.append({"pid": pid, "mode": rec.get("mode"), "alive": bool(pid > 1 and alive(pid) and same
                                                                        and str(node) in command_line(pid)),
                      "torn_down": rec.get("torn_down")})
    return found


def cancelled_run(tmp_path_factory):
    def build(tmp, node):
        # One launch per mode, no added one (COMPARE_PINNED: the suite's pins); 8-s windows: the cancel, once the
        # first level is on disk, lands during the second (ansible-runner asks its callback every few seconds).
        host = node1(node, bench_window_s=8)
        extravars = {"results_dir": str(tmp / "results"), "run_id": "awx"}
        host_dir = tmp / "results" / "awx" / "node1"

        def cancel() -> bool:  # AWX's cancel, once a level of the first launch is on disk
            try:
                return len(json.loads((host_dir / "baseline.json").read_text()).get("levels") or []) >= 1
            except (OSError, ValueError):
                return False

        thread, runner, pdd = start_playbook(tmp, "playbooks/compare.yml", inventory({"node1": host}), extravars,
                                             home=tmp / "home", name="runner-awx", timeout=RUN_TIMEOUT_S,
                                             cancel_callback=cancel)
        thread.join(RUN_TIMEOUT_S)
        assert not thread.is_alive(), "the cancelled run went on"
        cut = PlaybookRun.of(runner, pdd, extravars)
        # The task's worker outlives the SIGKILL (its own session): it notices the playbook gone within a
        # second, files what it measured and exits; wait for it (bounded), as the next job would find its word.
        wait_workers_gone(pdd)
        # The node lock's keeper saw the playbook gone too: it stops the server the run left, then drops the lock.
        wait_keeper_gone(node)
        kept = {p.stem: json.loads(p.read_text()) for p in host_dir.glob("*.json") if p.stem in ("baseline", "eagle3")}
        left = server_records(node)
        orphans_log = node / "state" / "orphans.jsonl"
        orphans = [json.loads(line) for line in orphans_log.read_text().splitlines()] if orphans_log.exists() else []
        (tmp / "cancelled.json").write_text(json.dumps({
            "status": runner.status, "rc": cut.rc, "stdout": cut.stdout, "kept": kept, "servers": left,
            "orphans": orphans,
            "state": json.loads((tmp / "results" / "awx" / "run-state.json").read_text())}))
        resumed = run_playbook(tmp, "playbooks/compare.yml", inventory({"node1": host}),
                               dict(extravars, resume=True), timeout=RUN_TIMEOUT_S)
        (tmp / "after.json").write_text(json.dumps({"servers": server_records(node), "left": [
            s["pid"] for s in left if s["alive"] and alive(s["pid"])]}))
        return resumed

    return node_run(tmp_path_factory, "compare-cancelled", build)


@pytest.fixture(scope="module")
def cancelled(tmp_path_factory):
    found, tmp = cancelled_run(tmp_path_factory)
    return (found, json.loads((tmp / "cancelled.json").read_text()), json.loads((tmp / "after.json").read_text()),
            tmp / "results" / "awx")


def test_an_awx_cancel_keeps_the_levels_and_the_resume_measures_only_what_is_missing(cancelled):
    found, cut, after, run_dir = cancelled
    # ansible-runner's cancel: a SIGKILL to ansible-playbook's process group (Runner.handle_termination), rc 254.
    assert cut["status"] == "canceled" and cut["rc"] == 254, (cut["status"], cut["rc"])
    # The sweep's worker (not in that group) stopped at once: the first level on disk, the one in flight not
    # kept, the file and the run marked interrupted with how to resume (the plan had said it too).
    kept = cut["kept"]["baseline"]
    assert [lv["concurrency"] for lv in kept["levels"]] == LEVELS[:1], kept["levels"]
    assert kept["status"] == "interrupted" and kept["error"].startswith(
        "interrupted by SIGKILL of ansible-playbook (an AWX cancel"), kept["error"]
    assert "eagle3" not in cut["kept"]
    assert cut["state"]["status"] == "incomplete", cut["state"]
    assert "ansible-playbook playbooks/compare.yml -e run_id=awx -e resume=true" in cut["state"]["message"]
    assert "-e run_id=awx -e resume=true resumes it" in cut["stdout"]
    # The server the run launched outlives the SIGKILL (its own session, as every launch), but not the run: the
    # node lock's keeper, still holding the lock, stopped its process group and retired its record.
    assert [s["alive"] for s in cut["servers"]] == [False], cut["servers"]
    assert [(o["mode"], o["signals"], o["stopped"], o["retired"]) for o in cut["orphans"]] == [
        ("baseline", ["SIGTERM"], True, True)], cut["orphans"]
    assert [s["torn_down"]["by"] for s in cut["servers"]] == ["specbench.core.node_lock (the lock's keeper)"]
    # The resumed attempt measures only what is missing and leaves no server behind.
    assert found.rc == 0, found.stdout[-4000:]
    assert "resuming run awx, attempt 2" in found.stdout
    measured = LEVELS[:1]
    assert after["left"] == [] and not any(s["alive"] for s in after["servers"]), after
    baseline = json.loads((run_dir / "node1" / "baseline.json").read_text())
    eagle3 = json.loads((run_dir / "node1" / "eagle3.json").read_text())
    assert [(lv["concurrency"], lv.get("attempt", 1)) for lv in baseline["levels"]] == [
        (c, 1 if c in measured else 2) for c in LEVELS]
    assert baseline["levels"][:len(measured)] == [dict(lv, attempt=1) for lv in kept["levels"]]
    assert [(lv["concurrency"], lv["attempt"]) for lv in eagle3["levels"]] == [(c, 2) for c in LEVELS]
    state = json.loads((run_dir / "run-state.json").read_text())
    assert state["status"] == "complete" and state["attempts"][0]["ended"].startswith("SIGKILL of ansible-playbook")
    report = (run_dir / "node1" / "report.md").read_text()
    assert "## Attempts" in report and "- `eagle3.json` (eagle3): attempt 2: C=1, C=4" in report
    assert "- `baseline.json` (baseline): attempt 1: C=1; attempt 2: C=4" in report

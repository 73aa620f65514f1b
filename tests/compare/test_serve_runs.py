"""playbooks/serve.yml on an emulated node (real processes, localhost only), serving the llama host
of the session's accuracy run (compare_kit.accuracy_run, which test_compare_runs judges: the
Llama-3.1-8B/H100 profile, EAGLE-3 at SGLang's automatic settings, top-k 4, pays at C=16, 1.68x
analytic, and loses at 64, 0.85x: the analytic crossover is near 50), copied into this module's
own results folder, all in one module-scoped fixture, in the order an infra team would meet them:

1. compare.yml: baseline and eagle3 at C = 16, 32 and 64 (short windows), the accuracy run;
2. what the run recommends: SGLang's adaptive speculation runs top-k 1 and the run measured top-k 4,
   so no adaptive table, and a static mode with the reason (serve only what was measured; serve.yml
   with the defaults on each emulator profile: test_default_path_runs);
3. serve.yml -e serve_mode=eagle3 -e serve_on_regression=fail: static EAGLE-3, the configuration
   measured, served and proved against the best static mode at each level; where it is clearly
   slower (C=64) the play fails with serve.json written and the service running;
4. the same again: a failed proof is never up to date: proved again on the server that runs it
   (nothing relaunched), as the second look of the configuration's sequence: serve.json keeps both
   looks with their times, and its verdicts are the looks combined (the looks pooled after each
   one, those intervals intersected; looks in place share one launch), held to the references
   measured just before its launch as look 1 was, a level whose own rate moved since look 1
   reading "the node changed" and adding no claim (and, were the proof verified, nothing would
   change);
   then the same once more with another build of the engine on the node (the emulator's reported
   version 0.5.23+specbench-emulator.1): refused in the preflight naming both versions, nothing
   touched, the service still running;
5. serve.yml -e serve_mode=baseline with a launch that cannot become ready (the emulator loading
   for 60 s, 3 s allowed): the play fails naming both, and the configuration that ran before is
   restored exactly as it ran and answers /health (never nothing serving);
6. serve.yml -e serve_mode=baseline: the baseline is clearly slower where eagle3 clearly pays
   (C=16): the proof fails there and the default rollback serves the run's best static
   configuration, eagle3 as measured, held against its own measurement;
7. serve.yml -e serve_state=absent: the service stopped, the GPUs (emulated) clean, serve.json
   retired and the report's Served section saying no longer served, no adaptive table file of
   serve.yml's left on the node.

The proof's verdicts are statistics: a rollback's own check compares a mode with its own earlier
measurement, and its 95% intervals may still read "worse" by chance (at most 2.5% per level, one
side). So the tests hold the outputs to each other (verdicts to their intervals, the play's outcome
to serve.json's action), never to an expected verdict, except where the run's own interval is far
from 1 (the baseline at C=16).
"""

from __future__ import annotations

import json
from pathlib import Path

import compare_kit
import pytest
from compare_kit import not_kept_up, run_playbook
from specbench_testkit import PlaybookRun, inventory, kill_node_servers, shared_run

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

LEVELS = compare_kit.LLAMA_LEVELS
RUN_ID = "acc"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    compare, compared, _nodes = compare_kit.accuracy_run(tmp_path_factory)

    def build(tmp: Path):
        # The accuracy run's llama host, copied, on a node of this module's own.
        node, port, hosts = compare_kit.llama_serve_host(tmp, compared, RUN_ID)
        extra = {"results_dir": str(tmp / "results"), "run_id": RUN_ID}
        runs = {}
        try:
            fail = {"serve_mode": "eagle3", "serve_on_regression": "fail"}
            nostart = {"serve_mode": "baseline", "sglang_server_emulator_load_seconds": 60,
                       "sglang_server_ready_timeout": 3}
            emulator_init = node / "sglang_emulator" / "__init__.py"
            for name, more in (("serve", fail), ("again", fail), ("newer", fail),
                               ("badplan", {**fail, "serve_planned_looks": 0}), ("nostart", nostart),
                               ("rollback", {"serve_mode": "baseline"}), ("absent", {"serve_state": "absent"})):
                # What the run before left, for the tests (the next run rewrites it).
                for src, dest in ((tmp / f"results/{RUN_ID}/llama/serve.json", tmp / f"before-{name}-serve.json"),
                                  (tmp / f"results/{RUN_ID}/llama/report.md", tmp / f"before-{name}-report.md"),
                                  # the service's own record: one per launch, by port
                                  (node / f"state/servers/{port}.json", tmp / f"before-{name}-server.json")):
                    if src.is_file():
                        dest.write_text(src.read_text())
                given = extra
                shipped = emulator_init.read_text() if name == "newer" else None
                if shipped is not None:  # another build of the node's engine since the run (same public version)
                    emulator_init.write_text(shipped.replace('"0.5.23+specbench-emulator"', '"0.5.23+specbench-emulator.1"'))
                runs[name] = run_playbook(tmp / name, "playbooks/serve.yml", inventory(hosts),
                                          extravars={**given, **more}, timeout=300)
                runs[name].save(tmp / f"{name}.json")
                if shipped is not None:
                    emulator_init.write_text(shipped)
                if name == "rollback":  # a bench on the served node, as another job template would start it
                    runs["bench"] = run_playbook(tmp / "bench", "playbooks/bench.yml", inventory(hosts),
                                                 extravars={**extra, "run_id": "srv-bench", "mode": "baseline"},
                                                 timeout=300)
                    runs["bench"].save(tmp / "bench.json")
        finally:
            kill_node_servers(node)
        return compare

    run, tmp = shared_run(tmp_path_factory, "serve-llama", build)
    names = ("serve", "again", "newer", "badplan", "nostart", "rollback", "bench", "absent")
    run.extra = {name: PlaybookRun.load(tmp / f"{name}.json") for name in names if (tmp / f"{name}.json").is_file()}
    return run, tmp


def host_dir(tmp: Path) -> Path:
    return tmp / "results" / RUN_ID / "llama"


def test_compare_crosses_on_a_machine_that_kept_up(served):
    run, tmp = served
    assert run.rc == 0, run.stdout[-4000:]
    assert not not_kept_up(host_dir(tmp)), "the machine did not keep up:\n" + "\n".join(not_kept_up(host_dir(tmp)))
    summary = json.loads((host_dir(tmp) / "summary.json").read_text())
    assert summary["speculate_ranges"] and summary["speculate_ranges"] != [[1, None]], summary["recommendation"]


def test_a_run_measured_at_another_top_k_recommends_no_adaptive_table_but_a_static_mode(served):
    unused, tmp = served
    summary = json.loads((host_dir(tmp) / "summary.json").read_text())
    assert summary["adaptive_config"] is None and not (host_dir(tmp) / "adaptive-config.json").exists()
    assert "runs top-k 1 only, and eagle3 was measured at top-k 4 (resolved by the server)" in summary["adaptive_refused"]
    plan = cmp.serve_plan(summary, "emulator")
    assert plan["mode"] == summary["static_choice"] in ("baseline", "eagle3"), plan
    assert summary["adaptive_refused"] in plan["text"] and plan["gain_text"] in summary["recommendation"]
    assert not (tmp / "before-serve-serve.json").exists(), "nothing served before the first serve"


def test_a_failed_proof_fails_again_on_a_rerun_and_never_turns_green(served):
    run, tmp = served
    first, again = run.extra["serve"], run.extra["again"]
    doc = json.loads((tmp / "before-again-serve.json").read_text())
    assert doc["mode"] == "eagle3" and doc["plan"]["adaptive_config"] is None and doc["state"] == "served"
    assert doc["base_url"].startswith("http://127.0.0.1:") and doc["service"]["launcher"] == "session"
    assert [lv["concurrency"] for lv in doc["levels"]] == LEVELS and doc["on_regression"] == "fail"
    for row in doc["levels"]:
        if row["ratio_ci95"]:
            low, high = row["ratio_ci95"]
            assert row["verdict"] == ("worse" if high < 1 else "better" if low > 1 else row["verdict"])
    assert doc["verified"] == all(r["verdict"] in ("better", "matches") for r in doc["levels"])
    assert doc["action"] == ("fail" if doc["worse"] else None)
    assert (first.rc == 0) == (doc["action"] is None), first.stdout[-6000:]
    report = (tmp / "before-again-report.md").read_text()
    assert "## Served" in report and "`eagle3` served at" in report.split("## Served")[1]
    second = json.loads((tmp / "before-nostart-serve.json").read_text())
    if doc["verified"]:
        assert again.rc == 0 and again.changed() == [] and "already runs" in again.stdout, again.stdout[-6000:]
    else:  # never up to date: proved again where it runs (the same process), and a worse level fails the play again
        assert "proving it again where it runs" in again.stdout, again.stdout[-6000:]
        assert again.task_started("Launch SGLang or the emulator") == []
        assert second["service"]["pid"] == doc["service"]["pid"] and second["launch_command"] == doc["launch_command"]
        assert second["written_at"] >= doc["written_at"] and second["levels"] != doc["levels"]
        assert (again.rc == 0) == (second["action"] is None), again.stdout[-6000:]
        if doc["worse"] and second["worse"]:
            assert "clearly slower than its reference" in again.stdout
        # One sequence, two looks: the first kept as it was written, the second taken in place with its time.
        assert doc["sequence"]["look"] == 1 and len(doc["looks"]) == 1
        assert second["sequence"]["key"] == doc["sequence"]["key"] and second["sequence"]["look"] == 2
        assert second["looks"][0] == doc["looks"][0] and len(second["looks"]) == 2
        assert second["looks"][1]["in_place"] is True and second["looks"][1]["at"] == second["written_at"]
        # Planned at look 1 for serve_planned_looks' 3: 2.25% of the 5%, then 1.125% (sequential.planned_look_alpha).
        assert doc["sequence"]["planned_looks"] == second["sequence"]["planned_looks"] == 3
        assert [lo["alpha"] for lo in second["looks"]] == pytest.approx([0.0225, 0.01125], rel=1e-3)
        stored = json.loads((host_dir(tmp) / "serve-looks.json").read_text())["sequences"][doc["sequence"]["key"]]
        assert stored["looks"][:2] == second["looks"]
        # The verdict is the combined one: the pooled looks' intervals after each look intersected.
        combined = cmp.combine_looks(second["looks"], second["margin"])
        for row in second["levels"]:
            cell = combined[row["concurrency"]]
            assert row["look_verdicts"] == cell["verdicts"] and row["verdict_look"] == cell["verdicts"][-1]
            if row.get("moved_since_look"):  # eagle3's own rate moved since look 1: this look makes no claim here
                assert row["moved_since_look"] == 1 and row["node_changed"] and row["verdict"] == cell["verdict"]
                assert second["looks"][1]["levels"][second["levels"].index(row)]["ratio_ci_family"] is None
            elif row["node_changed"]:  # clearly other than its own measurement in the run: the node, not eagle3
                assert cell["verdict"] in ("worse", "better") and row["verdict"] == "unclear"
                assert row["best_static_mode"] == "eagle3" and not row["reference_now"]
            else:
                assert row["verdict"] == cell["verdict"], (row, cell)
        # Proved in place, it is held to the references measured just before its launch, as look 1 was.
        assert [r["reference_now"] for r in second["levels"]] == [r["reference_now"] for r in doc["levels"]]
        assert second["worse"] == [r["concurrency"] for r in second["levels"] if r["verdict"] == "worse"]
        # A level clearly slower at the first look stays so unless the node changed under it.
        for conc in doc["worse"]:
            row = next(r for r in second["levels"] if r["concurrency"] == conc)
            assert row["verdict"] == "worse" or row["node_changed"] or row["looks_disagree"], row


def test_an_engine_version_other_than_the_runs_is_refused_before_anything_is_touched(served):
    run, tmp = served
    newer = run.extra["newer"]
    assert newer.rc != 0, newer.stdout[-6000:]
    assert ("the emulator is 0.5.23+specbench-emulator.1 on this node now, 0.5.23+specbench-emulator when the run "
            "measured eagle3") in newer.stdout, newer.stdout[-6000:]
    assert newer.task_started("Launch SGLang or the emulator") == [] and not newer.task_started("wait for clean GPUs")
    # The service the re-run proved still runs, untouched: the next run found the same record.
    assert json.loads((tmp / "before-nostart-server.json").read_text()) == \
        json.loads((tmp / "before-newer-server.json").read_text())


def test_a_plan_of_no_proofs_is_refused_before_anything_is_touched(served):
    run, tmp = served
    bad = run.extra["badplan"]
    assert bad.rc != 0 and "serve_planned_looks=0 (a whole number of proofs, 1 or more)" in bad.stdout, \
        bad.stdout[-6000:]
    assert bad.task_started("Launch SGLang or the emulator") == [] and not bad.task_started("wait for clean GPUs")
    assert json.loads((tmp / "before-badplan-server.json").read_text()) == \
        json.loads((tmp / "before-nostart-server.json").read_text())
    # Nothing proved, nothing written: the sequence of looks is the one the earlier runs left.
    assert (tmp / "before-badplan-serve.json").read_text() == (tmp / "before-nostart-serve.json").read_text()


def test_a_launch_that_fails_restores_the_previous_service(served):
    run, tmp = served
    nostart = run.extra["nostart"]
    assert nostart.rc != 0, nostart.stdout[-6000:]
    before = json.loads((tmp / "before-nostart-server.json").read_text())
    after = json.loads((tmp / "before-rollback-server.json").read_text())
    assert "baseline did not start" in nostart.stdout and "was restored and answers /health" in nostart.stdout, \
        nostart.stdout[-6000:]
    # The same configuration runs again, exactly as it ran (its command), in a new process.
    assert after["command"] == before["command"] and after["mode"] == before["mode"] == "eagle3"
    assert after["pid"] != before["pid"] and after["restored_after"] == "baseline did not start"
    # serve.json still tells the truth: what runs is the configuration it records.
    assert json.loads((tmp / "before-rollback-serve.json").read_text())["launch_command"] == after["command"]


def test_a_mode_that_loses_is_rolled_back_to_the_best_static_mode(served):
    run, tmp = served
    back = run.extra["rollback"]
    doc = json.loads((host_dir(tmp) / "serve.json").read_text())
    attempt = doc["rolled_back_from"]
    assert attempt["mode"] == "baseline" and attempt["action"] == "rollback" and attempt["verified"] is False
    assert 16 in attempt["worse"], attempt["levels"]  # clearly slower where eagle3 clearly pays
    results = cmp.load_host_results(str(host_dir(tmp)), None, [])
    assert doc["mode"] == cmp.rollback_mode(results) == "eagle3", doc["mode"]
    assert doc["reference"] == "eagle3" and {r["best_static_mode"] for r in doc["levels"]} == {"eagle3"}
    assert doc["rollback"]["from"] == "baseline" and doc["rollback"]["to"] == "eagle3"
    # The rollback's own check decides the play: it fails (serve.json written first) only on a worse level.
    assert (back.rc == 0) == (doc["action"] is None), back.stdout[-6000:]
    assert "Rolled back" in (host_dir(tmp) / "report.md").read_text()
    # The service the first serve left was replaced: the teardown before the new launch killed it.
    replaced = json.loads((tmp / "before-rollback-server.json").read_text())
    killed = [k.get("pid") for _h, task, res in back.events_of("runner_on_ok") if "wait for clean GPUs" in task
              for k in res.get("killed") or []]
    assert replaced["pid"] in killed, killed
    # The launch read which adaptive table file the replaced service read, to remove it once the new one started
    # (static eagle3 reads none).
    assert back.task("Read the adaptive table file the configuration running now reads")["adaptive_config_file"] is None


def test_a_bench_on_a_served_node_is_refused_naming_the_service(served):
    """Another job template's bench on the node serve.yml serves: refused under the lock, before
    anything is touched, naming the service and the fix; the service still answers after it."""
    run, tmp = served
    bench = run.extra["bench"]
    assert bench.rc != 0, bench.stdout[-4000:]
    refusals = [m for _h, task, m in bench.failures() if "Refuse a node where serve.yml's service runs" in task]
    assert refusals, bench.failures()
    refusal = refusals[0]
    record = json.loads((tmp / "before-absent-server.json").read_text())
    assert record["service"] is True and (record.get("unit") or f"pid {record['pid']}") in refusal, refusal
    assert "take_served_node=true" in refusal and "serve_state=absent" in refusal, refusal
    for touch in ("Start the server", "wait for clean GPUs", "Tear down"):  # the launch role's start, the teardowns
        assert not bench.task_started(touch), f"bench ran {touch!r} on a served node"
    # The service bench found is the one absent then stopped: nothing replaced it in between.
    teardown = run.extra["absent"].task("then wait for clean GPUs")
    assert record["pid"] in [k["pid"] for k in teardown["killed"]], teardown


def test_absent_stops_the_service_and_leaves_the_gpus_clean(served):
    run, tmp = served
    absent = run.extra["absent"]
    assert absent.rc == 0, absent.stdout[-6000:]
    record = json.loads((tmp / "before-absent-server.json").read_text())
    teardown = absent.task("then wait for clean GPUs")
    assert teardown["clean"] is True and record["pid"] in [k["pid"] for k in teardown["killed"]], teardown
    doc = json.loads((host_dir(tmp) / "serve.json").read_text())
    assert doc["state"] == "retired" and "serve_state=absent" in doc["retired_why"]
    served = (host_dir(tmp) / "report.md").read_text().split("## Served")[1]
    assert "**No longer served**" in served and "was served at" in served
    # The adaptive table file goes with its service (eagle3 as measured read none), and no table file serve.yml
    # wrote is left in the node's state folder.
    assert absent.task("Read the service this node runs now")["adaptive_config_file"] is None
    assert not list((tmp / "node" / "state").glob("serve-adaptive-config-*.json"))

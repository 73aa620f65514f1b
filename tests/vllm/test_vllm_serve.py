"""playbooks/serve.yml on a real vLLM server (CPU build, tiny model), built on the session pool's
compare run (conftest.POOL "compare": baseline, n-gram and a draft model at C = 1, 4, 16): the
schedule derived from that run's verdicts served (speculation off wherever a level does not clearly
pay, so above the crossing), one vLLM launch, the proof sweep at the run's levels, serve.json and
the report's Served section; run again: nothing changes where the proof verified (it is proved
again on the running server, not relaunched, where it did not: the second look of one sequence, the
verdict the two looks combined); then serve_state=absent leaves the emulated GPUs clean.

serve_on_regression is ``keep`` here: a rollback would launch a second vLLM server (minutes on
CPU). Everything is held to the run's own outputs (the schedule to its verdicts, serve.json to the
report, verdicts to their intervals), never to absolute speeds: CPU throughput varies by 30-70%
from run to run."""
from __future__ import annotations

import json

import pytest
import vllmkit

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def served(vllm_pool):
    """(compare run, {serve, again, absent: PlaybookRun}, the launch record before absent)."""
    compare = vllm_pool("compare")
    hostvars = vllmkit.node_vars(compare.folder, compare.port)
    extra = vllmkit.bench_vars(compare.folder, serve_on_regression="keep")
    runs, record = {}, {}
    # A service left by a failure here is killed with the pool's folders at the session's end.
    for name, more in (("serve", {}), ("again", {}), ("absent", {"serve_state": "absent"})):
        if name == "absent":
            record = vllmkit.launch_record(compare.node, compare.port)
        runs[name] = vllmkit.run_playbook(compare.folder / f"serve-{name}", "playbooks/serve.yml", hostvars,
                                          {**extra, **more}, timeout=900)
    return compare, runs, record


def host_dir(compare):
    return compare.run.results_dir / compare.run.run_id / "localhost"


def test_the_served_schedule_is_the_runs_own(served):
    compare, runs, _record = served
    assert runs["serve"].rc == 0, runs["serve"].stdout[-6000:]
    summary = json.loads((host_dir(compare) / "summary.json").read_text())
    doc = json.loads((host_dir(compare) / "serve.json").read_text())
    plan = summary["serve_schedule"]
    assert doc["mode"] == plan["mode"] and doc["plan"]["schedule"] == plan["schedule"]
    if plan["schedule"] is None:  # no level clearly paid in this run: the baseline, no speculation
        assert doc["mode"] == "baseline" and "--speculative-config" not in doc["launch_command"]
        assert not any(lv["verdict"] == "pays" for c in summary["comparisons"].values() for lv in c["levels"])
        return
    levels = summary["comparisons"][doc["mode"]]["levels"]
    k = summary["servers"][doc["mode"]]["speculative_config"]["num_speculative_tokens"]
    assert plan["schedule"] == cmp.vllm_schedule(levels, k, 32)
    by_bs = {bs: kk for start, end, kk in plan["schedule"] for bs in range(start, end + 1)}
    for level in levels:  # speculation on exactly where the run says it clearly pays
        assert by_bs[level["concurrency"]] == (k if level["verdict"] == "pays" else 0), level
    spec = json.loads(doc["launch_command"][doc["launch_command"].index("--speculative-config") + 1])
    assert spec["num_speculative_tokens_per_batch_size"] == plan["schedule"]


def test_the_proof_is_written_and_matches_the_report(served):
    compare, _runs, _record = served
    doc = json.loads((host_dir(compare) / "serve.json").read_text())
    assert doc["base_url"].startswith("http://127.0.0.1:") and doc["service"]["launcher"] == "session"
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4, 16]
    for row in doc["levels"]:
        if row["ratio_ci95"] is not None:
            low, high = row["ratio_ci95"]
            assert low <= row["ratio"] <= high
        # The verdict is the looks' combined one: read from the intersection of the pooled intervals after each look.
        if row["ratio_ci_combined"] is None:
            assert row["verdict"] == "unclear", row
        else:
            low, high = row["ratio_ci_combined"]
            assert row["verdict"] != "worse" or high < 1, row
            assert row["verdict"] != "better" or low > 1, row
    assert doc["verified"] == all(r["verdict"] in ("better", "matches") for r in doc["levels"])
    assert doc["on_regression"] == "keep" and doc["action"] == ("keep" if doc["worse"] or doc["ignored_schedule"] else None)
    # Each level held to the plan's own reference: the static mode where the schedule speculates, else the baseline.
    for row in doc["levels"]:
        assert row["best_static_mode"] == (doc["mode"] if row["plan_speculates"] else "baseline"), row
        if row["plan_speculates"] and row["drafts_counted"] is not None:
            assert (row["drafts_counted"] > 0) == (row["concurrency"] not in doc["ignored_schedule"]), row
    report = (host_dir(compare) / "report.md").read_text()
    served_part = report.split("## Served", 1)[1]
    # The fixture ran serve_state=absent last: serve.json is retired and the report says so, its proof kept.
    assert doc["state"] == "retired" and "**No longer served**" in served_part
    assert f"`{doc['mode']}` was served at {doc['base_url']}" in served_part
    assert ("**verified**" if doc["verified"] else "**not verified**") in served_part
    assert "## Speculation by batch size (vLLM)" in report
    if doc["plan"]["schedule"]:
        assert json.dumps(doc["plan"]["schedule"]) in report


def test_serving_again_is_idempotent_only_after_a_verified_proof(served):
    compare, runs, _record = served
    again = runs["again"]
    assert again.rc == 0, again.stdout[-6000:]
    status = again.task("Read the service this node runs now")
    assert status["running"] and status["healthy"] and status["same"], status
    # The parser the compare run read from this vLLM is read back, not probed again (one install, one probe).
    assert again.task("Check every flag and the speculative method")["parser_cache"] == "hit"
    first = runs["serve"].task("Hold against its references and write serve.json")["doc"]
    if first["verified"]:
        assert again.changed() == [], again.changed()
    else:  # a failed or unclear proof is never up to date: proved again on the server that runs (not relaunched)
        assert "proving it again where it runs" in again.stdout, again.stdout[-6000:]
        assert again.task_started("Launch vLLM") == []
        second = again.task("Hold against its references and write serve.json")["doc"]
        assert second["service"]["pid"] == first["service"]["pid"], (first["service"], second["service"])
        # The second look of one sequence: the first kept, the verdict the looks combined (never the last alone).
        assert [lo["look"] for lo in second["looks"]] == [1, 2] and second["looks"][0] == first["looks"][0]
        assert second["looks"][1]["in_place"] is True
        # Planned at look 1 for serve_planned_looks (3): 2.25% of the error rate, then 1.125% (planned_look_alpha).
        assert second["sequence"]["planned_looks"] == 3
        assert [lo["alpha"] for lo in second["looks"]] == pytest.approx([cmp.planned_look_alpha(k, 3) for k in (1, 2)])
        combined = cmp.combine_looks(second["looks"], second["margin"])
        for row in second["levels"]:
            cell = combined[row["concurrency"]]
            if not row["node_changed"] or row.get("moved_since_look"):
                assert row["verdict"] == cell["verdict"], (row, cell)
            if "worse" in cell["verdicts"][:1] and not row["looks_disagree"] and not row.get("moved_since_look"):
                assert row["verdict"] == "worse", row  # clearly slower at look 1 stays so
        assert not second["verified"] or all(r["verdict"] in ("better", "matches") for r in second["levels"])


def test_absent_stops_the_service_and_leaves_the_gpus_clean(served):
    _compare, runs, record = served
    absent = runs["absent"]
    assert absent.rc == 0, absent.stdout[-6000:]
    teardown = absent.task("then wait for clean GPUs")
    assert teardown["clean"] is True and record["pid"] in [k["pid"] for k in teardown["killed"]], teardown
    assert not vllmkit.session_processes(record["sid"])

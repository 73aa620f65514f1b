"""playbooks/compare.yml through ansible-runner, on emulated nodes (real processes, localhost only).

Two runs, each shared by the tests below it:

* ``accuracy_run`` (compare_kit.accuracy_run; test_serve_runs serves a copy of its llama host):
  two emulated hosts at once on localhost (two emulators, two ports, two device folders), one on
  the emulator's default profile (the seeds' Kimi-K2.5 node, crossover near C=1.3), one on the
  second profile (Llama-3.1-8B on an H100, crossover near C=50). Each host's crossover must match
  the emulator's analytic model within one level.
  The browser test opens its report.html files in headless Chromium (report_browser).
* ``fault_run`` (started beside the accuracy run: it mostly waits): a fleet where every host has
  its own fault: eagle3 fails to start (its draft does not fit the shared memory fraction), the
  server crashes mid-sweep, the teardown cannot clean (a GPU holder it must not kill), and a host
  that cannot be reached.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import compare_kit
import markupsafe
import pytest
import report_browser
from compare_kit import KIMI, KIMI_LEVELS, LLAMA, LLAMA_LEVELS, RUN_TIMEOUT_S, node_vars, not_kept_up, run_playbook
from compare_synth import truth_crossover
from specbench_testkit import free_port, inventory, kill_node_servers, shared_run, start_shared_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def summary(run_dir: Path, host: str) -> dict:
    return json.loads((run_dir / host / "summary.json").read_text())


def within_one_level(found: dict, truth: float, levels: list[int]) -> bool:
    """The truth lies inside the crossover's interval widened to the levels around it (one level's step)."""
    ci = found.get("crossover_ci95") or [None, None]
    bracket = found.get("crossover_bracket") or [None, None]
    lo = ci[0] if ci[0] is not None else (bracket[0] if bracket[0] is not None else min(levels))
    hi = ci[1] if ci[1] is not None else (bracket[1] if bracket[1] is not None else max(levels))
    lo_ext = max((c for c in levels if c < lo), default=min(levels))
    hi_ext = min((c for c in levels if c > hi), default=max(levels))
    return lo_ext <= truth <= hi_ext


# ---------------------------------------------------------------------------------------------
# Accuracy: both profiles, two hosts at once
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def accuracy_run(tmp_path_factory):
    # The fault fleet (below) mostly waits (1-s windows, a crash, a teardown that cannot clean, an
    # unreachable host): it runs beside the accuracy run, and fault_run reads it when it is done.
    start_shared_run(tmp_path_factory, "compare-faults", build_faults)
    return compare_kit.accuracy_run(tmp_path_factory)


def test_compare_runs_every_mode_on_two_hosts_at_once_and_succeeds(accuracy_run):
    run, run_dir, nodes = accuracy_run
    assert run.rc == 0, run.stdout[-4000:]
    for host in ("kimi", "llama"):
        for name in ("baseline.json", "eagle3.json", "summary.json", "summary.csv", "report.md",
                     "throughput.png", "per-stream.png", "speedup.png", "compare-run.json"):
            assert (run_dir / host / name).is_file(), f"{host}/{name}"
        # An adaptive table only from a mode measured as SGLang's adaptive speculation serves it (top-k 1): kimi's
        # EAGLE-3 resolves top-k 1 (SGLang's automatic settings for a non-Llama model), llama's top-k 4.
        assert (run_dir / host / "adaptive-config.json").is_file() == (host == "kimi"), host
        outcome = json.loads((run_dir / host / "compare-run.json").read_text())["outcomes"]
        assert outcome["baseline"]["status"] == outcome["eagle3"]["status"] == "ok"
        assert outcome["eagle3"]["gpu_before"]["clean"] and outcome["eagle3"]["gpu_after"]["clean"]
    # Two emulators, two ports, two device folders: each host's server listened on its own port.
    ports = {json.loads((run_dir / h / "eagle3.json").read_text())["server"]["port"] for h in ("kimi", "llama")}
    assert len(ports) == 2
    assert all((node / "emulated-dev").is_dir() for node in nodes.values())


@pytest.mark.parametrize(
    "host, profile, levels, lengths",
    [("kimi", KIMI, KIMI_LEVELS, (256, 256)), ("llama", LLAMA, LLAMA_LEVELS, (64, 64))],
)
def test_crossover_matches_the_emulators_analytic_model_within_one_level(accuracy_run, host, profile, levels, lengths):
    _unused1, run_dir, _unused2 = accuracy_run
    # The machine first: a level it could not serve at the model's speed is about the machine.
    assert not not_kept_up(run_dir / host), "the machine did not keep up:\n" + "\n".join(not_kept_up(run_dir / host))
    found = summary(run_dir, host)
    truth = truth_crossover(profile, *lengths)
    assert found["complete"], found["incomplete_reasons"]
    # Near C=1.3 (Kimi) the first level's speedup is a few percent: its interval may straddle 1
    # (unclear, a region of its own: unclear_then_loses), or read clearly below 1 (never_pays). It
    # must then still put the crossing right: below the first level that clearly loses, and every
    # level from there on clearly slower.
    assert found["crossover_status"] in ("crosses", "never_pays", "unclear_then_loses"), found["crossover_text"]
    if found["crossover_status"] in ("never_pays", "unclear_then_loses"):
        verdicts = [lv["verdict"] for lv in found["levels"]]
        assert "pays" not in verdicts, found["levels"]
        first_loss = next(lv["concurrency"] for lv in found["levels"] if lv["verdict"] == "loses")
        assert truth <= first_loss, (truth, found["levels"])
        assert all(v == "loses" for v in verdicts[verdicts.index("loses"):]), found["levels"]
        unclear = [lv["concurrency"] for lv in found["levels"] if lv["verdict"] == "unclear"]
        # Each unclear level is named: alone ("C=2") or in its stretch ("C=1 to 2").
        named = [(r["from_concurrency"], r["to_concurrency"]) for r in found["regions"] if r["verdict"] == "unclear"]
        assert all(any(a <= c <= b for a, b in named) for c in unclear), found["regions"]
        assert all(f"C={a:g}" in found["crossover_text"] for a, unused in named), found["crossover_text"]
    assert within_one_level(found, truth, levels), (truth, found["crossover_concurrency"], found["crossover_ci95"])
    if found["crossover_status"] == "crosses":
        # Speculation stops at the crossing when the last level that clearly pays is next to the first that
        # clearly loses; with an unclear (or failed, or saturated) level between them it stops just above the
        # last clear one, and the text names the stretch (recommend.speculate_ranges: never on without
        # evidence). Beside three loops (load 10-14) llama's C=32 read unclear and the crossing, at 51.9
        # between C=16 and 64, left speculation on below 17.
        verdicts = [(lv["concurrency"], lv["verdict"]) for lv in found["levels"]]
        last_pays = max(c for c, v in verdicts if v == "pays")
        first_loss = min(c for c, v in verdicts if v == "loses" and c > last_pays)
        between = [c for c, v in verdicts if last_pays < c < first_loss]
        # One rule (issue 36): speculation runs from the first clearly paying level (never below the lowest level
        # measured: llama's start at C=16) and stops just above the last one, whether an unclear level follows or
        # the first losing one; the interpolated crossing is only a labelled estimate.
        end = math.floor(last_pays) + 1
        assert found["speculate_ranges"][-1][1] == end, (verdicts, found["speculate_ranges"])
        assert found["speculate_below"] in (None, end), (verdicts, found["speculate_below"])
        if between:
            assert f"C={between[0]:g}" in found["recommendation"], found["recommendation"]
        if found["adaptive_refused"] is None:
            assert found["adaptive_config"][str(end)] == {"candidate_steps": [0]}
        else:  # measured at top-k 4: no table; the static mode serve.yml serves is named, and why
            assert found["adaptive_config"] is None and "top-k 4 (resolved by the server)" in found["adaptive_refused"]
            assert f"serve.yml serves {'the baseline' if found['static_choice'] == 'baseline' else 'eagle3'}" in \
                found["recommendation"], found["recommendation"]


def test_the_report_shows_confounders_first_both_plots_and_the_recommendation(accuracy_run):
    _unused1, run_dir, _unused2 = accuracy_run
    for host in ("kimi", "llama"):
        text = (run_dir / host / "report.md").read_text()
        assert text.index("## Confounders") < text.index("## Verdict") < text.index("## Plots")
        assert "![Output throughput](throughput.png)" in text and "![Per-stream decode speed](per-stream.png)" in text
        assert "**Recommendation**" in text
        # kimi's table (top-k 1) with the flag that reads it; llama's none, with the reason (top-k 4)
        assert ("--speculative-adaptive-config" in text) == (host == "kimi"), host
        refused = summary(run_dir, host)["adaptive_refused"]
        assert bool(refused) <= (host == "llama") and (f"No adaptive table: {refused}" in text) == bool(refused), host
    index = json.loads((run_dir / "index.json").read_text())
    assert set(index["hosts"]) == {"kimi", "llama"} and index["hosts_complete"] == 2  # not the host --limit left out
    assert (run_dir / "index.md").is_file()
    # Two nodes of other kinds (models, GPUs, levels, modes) are never read as one: each is named apart, and why.
    assert index["kinds"] == [] and set(index["apart"]) == {"kimi", "llama"}, index["apart"]
    assert "its own kind: bench_concurrency [1, 2, 4] where another has [16, 32, 64]" in index["apart"]["kimi"], \
        index["apart"]
    assert "kimi is not pooled: its own kind" in (run_dir / "index.md").read_text()


def test_the_html_reports_open_in_a_browser_whole_with_every_plot_and_section(browser, accuracy_run):
    """Each host's report.html and the run's index.html in headless Chromium: no console message,
    every plot shown from its inline data, no empty section, the index's links to each report
    resolve. The screenshots stay in tests/.tmp/report-html/ (printed)."""
    _unused1, run_dir, _unused2 = accuracy_run
    shots = []
    for host in ("kimi", "llama"):
        page = run_dir / host / "report.html"
        found = report_browser.check_page(page, report_browser.ARTIFACTS / f"check-{host}")
        assert not found["console"], found["console"]
        assert not found["problems"], found["problems"]
        plots = summary(run_dir, host)["files"]["plots"]
        assert len(found["images"]) == len(plots) >= 5, (found["images"], plots)  # the latency and terms plots too
        assert found["sections"][:2] == ["verdict", "plots"], found["sections"]  # the card holds the Verdict
        assert found["sections"][2].startswith("confounders-"), found["sections"]
        assert any(s.endswith("-against-baseline-per-level") for s in found["sections"]), found["sections"]
        text = page.read_text()
        assert '<blockquote class="emulated">' in text and "<script" not in text
        assert str(markupsafe.escape(summary(run_dir, host)["recommendation"])) in text
        shots.append(report_browser.screenshot(page, report_browser.ARTIFACTS / f"{host}-report.png", found["height"]))
    index = report_browser.check_page(run_dir / "index.html", report_browser.ARTIFACTS / "check-index")
    assert not index["console"] and not index["problems"], index
    reports = [link for link in index["links"] if link.endswith("report.html")]
    assert sorted(reports) == ["kimi/report.html", "llama/report.html"]
    assert all((run_dir / link).is_file() for link in index["links"]), index["links"]
    print("report.html screenshots:", *shots)


def test_every_mode_gave_the_baselines_exact_outputs_and_the_gain_is_weighed_by_the_traffic(accuracy_run):
    """The output match ran before each mode's sweep (8 prompts at C=1, temperature 0, chat API, token ids from
    return_token_ids) and the emulator, like greedy verification, gave every mode the baseline's tokens. The
    traffic given (C=1, 32 and 1000) falls a quarter in each host's levels (kimi 1-4, llama 16-64) and three
    quarters outside them, never extrapolated."""
    _unused1, run_dir, _unused2 = accuracy_run
    for host, modes in (("kimi", ("eagle3", "eagle3-adaptive")), ("llama", ("eagle3",))):
        base = json.loads((run_dir / host / "baseline.json").read_text())["output_match"]
        assert (base["prompts"], base["source"], base["api"], base["max_tokens"]) == (8, "token_ids", "chat", 32)
        assert all(len(o["token_ids"]) == 32 for o in base["outputs"])
        found = summary(run_dir, host)
        assert {m: found["output_match"][m]["share"] for m in modes} == dict.fromkeys(modes, 1.0)
        assert not [c for c in found["confounders"] if c["kind"].startswith("output")]
        gain = found["traffic"]["gains"]["eagle3"]
        assert gain["outside_share"] == 0.75 and gain["known_share"] + gain["unknown_share"] == 0.25
        text = (run_dir / host / "report.md").read_text()
        assert "## Outputs unchanged by speculation" in text and "## Weighed by traffic" in text


def test_set_stats_carries_the_summary_for_awx(accuracy_run):
    run, run_dir, _unused1 = accuracy_run
    stats = run.artifact_stats()["specbench_compare"]
    assert stats["run_id"] == "acc" and stats["incomplete_hosts"] == []
    for host in ("kimi", "llama"):
        assert stats["hosts"][host]["crossover_concurrency"] == summary(run_dir, host)["crossover_concurrency"]
        assert stats["hosts"][host]["recommendation"].startswith(("Speculate", "Do not"))
        # Where a workflow's next node (or a person reading the job's artifacts) finds each report.
        report = stats["reports"][host]
        assert Path(report["html"]).samefile(run_dir / host / "report.html")
        assert Path(report["md"]).samefile(run_dir / host / "report.md")
        assert report["verdict"] == f"{host}: {summary(run_dir, host)['crossover_status'].replace('_', ' ')}: " \
            f"{stats['hosts'][host]['recommendation']}"
    assert Path(stats["index_html"]).samefile(run_dir / "index.html")
    # ansible-runner keeps the stats event among the run's artifacts, as AWX does.
    saved = [json.loads(p.read_text()) for p in (run.pdd / "artifacts").glob("*/job_events/*.json")]
    (stats_event,) = [e for e in saved if e.get("event") == "playbook_on_stats"]
    assert stats_event["event_data"]["artifact_data"]["specbench_compare"]["run_id"] == "acc"


def test_the_recommended_adaptive_table_tracks_the_better_of_the_two_modes(accuracy_run):
    _unused1, run_dir, _unused2 = accuracy_run
    found = summary(run_dir, "kimi")
    assert found["modes"] == ["baseline", "eagle3", "eagle3-adaptive"] and found["spec_mode"] == "eagle3"
    tracking = found["tracking"]
    assert tracking["tracks"], tracking
    assert [row["better_mode"] for row in tracking["levels"]][1:] == ["baseline", "baseline"]
    assert "eagle3-adaptive against the better mode" in (run_dir / "kimi" / "report.md").read_text()


def test_the_server_settings_were_identical_in_both_modes(accuracy_run):
    _unused1, run_dir, _unused2 = accuracy_run
    for host in ("kimi", "llama"):
        found = summary(run_dir, host)
        kinds = {c["kind"] for c in found["confounders"]}
        assert "capacity_differs" not in kinds and "mode_failed" not in kinds, found["confounders"]
        caps = found["servers"]
        assert caps["baseline"]["capacity"]["max_running_requests"] == caps["eagle3"]["capacity"]["max_running_requests"]


# ---------------------------------------------------------------------------------------------
# The fault matrix, one fleet: a fault per host
# ---------------------------------------------------------------------------------------------
FAULT_HOSTS = ("faulty", "dirty", "unreachable")


def build_faults(tmp: Path):
    nodes = {h: tmp / f"node-{h}" for h in FAULT_HOSTS if h != "unreachable"}
    quick = {"bench_warmup_s": 0.5, "bench_window_s": 1, "gpu_clean_timeout_s": 5}
    hosts = {
        # Three modes. eagle3's draft head needs 1200 MiB more per GPU than the shared 0.74 fraction
        # leaves, so it cannot start; ngram (no draft model) starts and dies once 18 generation
        # requests arrived: the 8 output-match prompts sent before the sweep
        # (compare_output_match_prompts), then about 6 in the first level, so during its second level
        # (no second measurement of a level the machine did not keep up with: it would move the crash).
        "faulty": node_vars(nodes["faulty"], free_port(), compare_modes=["baseline", "eagle3", "ngram"],
                            sglang_server_mem_fraction_static=0.74, bench_concurrency=[1, 4],
                            bench_saturated_retries=0,
                            sglang_server_mode_extra_args={"ngram": ["--emulator-crash-after", "18"]}, **quick),
        # The server's processes are on the never-kill list (as if another tenant's job held the GPUs):
        # the teardown after baseline cannot clean, so eagle3 must never launch.
        "dirty": node_vars(nodes["dirty"], free_port(), bench_concurrency=[1],
                           gpu_never_kill=["nvidia-persistenced", "python3", "python", "sglang::schedul"],
                           **{**quick, "gpu_clean_timeout_s": 1}),
        # Nothing listens on this loopback port: SSH cannot connect.
        "unreachable": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": free_port(),
                        "ansible_user": "nobody", "ansible_ssh_common_args": "-o ConnectTimeout=3",
                        "engine": "emulator", "specbench_node_dir": str(tmp / "node-unreachable")},
    }
    try:
        return run_playbook(tmp, "playbooks/compare.yml", inventory(hosts), timeout=RUN_TIMEOUT_S,
                            extravars={"results_dir": str(tmp / "results"), "run_id": "faults",
                                       "compare_plots": False})
    finally:
        for node in nodes.values():
            kill_node_servers(node)


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory):
    run, tmp = shared_run(tmp_path_factory, "compare-faults", build_faults)  # started beside the accuracy run
    return run, tmp / "results" / "faults"


def outcomes(run_dir: Path, host: str) -> dict:
    return json.loads((run_dir / host / "compare-run.json").read_text())["outcomes"]


def test_a_fleet_with_failures_fails_only_after_every_report_is_written(fault_run):
    run, run_dir = fault_run
    assert run.rc != 0
    index = json.loads((run_dir / "index.json").read_text())
    assert set(index["hosts"]) == set(FAULT_HOSTS)
    assert index["hosts_complete"] == 0
    final = [m for _unused1, t, m in run.failures() if "Fail when a mode or a host did not complete" in t]
    assert final and "Incomplete comparison on" in final[0]
    stats = run.artifact_stats()["specbench_compare"]
    assert set(stats["incomplete_hosts"]) == set(FAULT_HOSTS)
    for host in ("faulty", "dirty"):
        assert (run_dir / host / "report.md").is_file() and (run_dir / host / "summary.csv").is_file()


def test_a_server_that_fails_to_start_leaves_the_other_modes_results_and_an_incomplete_report(fault_run):
    _unused1, run_dir = fault_run
    found = summary(run_dir, "faulty")
    assert found["status"] == "incomplete"
    assert found["series"]["baseline"][0]["output_tok_per_s"] > 0
    (reason,) = [r for r in found["incomplete_reasons"] if r.startswith("eagle3")]
    assert "launch of eagle3" in reason and "memory" in reason.lower()
    assert not (run_dir / "faulty" / "eagle3.json").exists()
    # The mode after the one that failed to start still ran.
    assert outcomes(run_dir, "faulty")["ngram"]["status"] == "failed"
    assert (run_dir / "faulty" / "ngram.json").is_file()
    report = (run_dir / "faulty" / "report.md").read_text()
    assert report.index("**INCOMPLETE**") < report.index("## Confounders")


def test_an_incomplete_hosts_html_report_opens_whole_and_says_so_first(browser, fault_run):
    """The fault fleet's pages in Chromium (compare_plots: false there): INCOMPLETE above the verdict,
    the failed and crashed levels as they are, no empty section, no plots section without plots; the
    index links every host's report, the unreachable one's included (it says what was not measured)."""
    _unused1, run_dir = fault_run
    page = run_dir / "faulty" / "report.html"
    found = report_browser.check_page(page, report_browser.ARTIFACTS / "check-faulty")
    assert not found["console"] and not found["problems"] and not found["images"], found
    assert "plots" not in found["sections"] and found["sections"][:1] == ["verdict"], found["sections"]
    text = page.read_text()
    assert text.index('<blockquote class="incomplete">') < text.index('class="card incomplete"')
    verdicts = {lv["verdict"] for lv in summary(run_dir, "faulty")["comparisons"]["ngram"]["levels"]}
    assert all(f'v-{v}">{v}</td>' in text for v in verdicts), verdicts
    index = report_browser.check_page(run_dir / "index.html", report_browser.ARTIFACTS / "check-faults-index")
    assert not index["console"] and not index["problems"], index
    assert sorted(link for link in index["links"] if link.endswith(".html")) == [
        f"{host}/report.html" for host in sorted(FAULT_HOSTS)]
    assert all((run_dir / link).is_file() for link in index["links"])


def test_a_crash_mid_sweep_keeps_the_levels_measured_before_it(fault_run):
    _unused1, run_dir = fault_run
    spec = json.loads((run_dir / "faulty" / "ngram.json").read_text())
    measured = [lv for lv in spec["levels"] if lv.get("output_tok_per_s")]
    assert measured and measured[0]["concurrency"] == 1
    assert spec["status"] in ("stopped", "complete_with_errors") and spec["error"]
    found = summary(run_dir, "faulty")
    ngram = found["comparisons"]["ngram"]
    assert ngram["levels"][0]["speedup"] is not None
    kinds = {c["kind"] for c in found["confounders"]}
    assert {"level_error", "launch"} <= kinds  # the error, and the crash flag recorded as the mode's own argument
    outcome = outcomes(run_dir, "faulty")["ngram"]
    assert "sweep of ngram" in outcome["error"] and outcome["gpu_after"]["clean"] is True


def test_a_teardown_that_cannot_clean_stops_the_host_before_the_next_mode_launches(fault_run):
    run, run_dir = fault_run
    outcome = outcomes(run_dir, "dirty")
    assert outcome["baseline"]["status"] == "teardown_failed"
    assert outcome["baseline"]["gpu_after"]["clean"] is False and outcome["baseline"]["gpu_after"]["dirty_gpus"]
    assert "GPUs not clean" in outcome["baseline"]["teardown_error"]
    assert outcome["eagle3"]["status"] == "skipped"
    assert "teardown after baseline could not make the GPUs clean" in outcome["eagle3"]["error"]
    launches = [t for h, t, _unused1 in run.results("runner_on_ok") if h == "dirty" and "Start the server" in t]
    assert len(launches) == 1  # baseline only: eagle3 was never launched
    found = summary(run_dir, "dirty")
    assert any(c["kind"] == "gpu_not_clean" for c in found["confounders"])


def test_an_unreachable_host_does_not_stop_the_others(fault_run):
    run, run_dir = fault_run
    assert run.stats()["dark"].get("unreachable")
    entry = json.loads((run_dir / "index.json").read_text())["hosts"]["unreachable"]
    assert entry["status"] == "failed"
    assert any("unreachable" in r for r in entry["incomplete_reasons"])
    # The others got as far as their faults allowed.
    assert (run_dir / "faulty" / "ngram.json").is_file() and (run_dir / "dirty" / "baseline.json").is_file()

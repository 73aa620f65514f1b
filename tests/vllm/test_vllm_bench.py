"""Every measured mode against a real vLLM server (CPU build, tiny model) that a playbook
launched, swept at C = 1, 4, 16 and tore down: the runs of the session's pool (conftest.POOL),
bench.yml with n-gram on the completions API and compare.yml's baseline, n-gram and draft model
on the chat API. The server's counters are read by the test itself (vllmkit.Scraper),
independently of the client, and held against each level's recorded window."""
from __future__ import annotations

import pytest
import vllmkit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# (pooled run, mode): each mode's results file as the playbook wrote it.
CASES = [pytest.param(run, mode, id=f"{run}-{mode}")
         for run, mode in (("bench", "ngram"), ("compare", "baseline"), ("compare", "ngram"), ("compare", "draft"))]
SPECULATIVE = [case for case in CASES if case.values[1] != "baseline"]
SPEC_TOKENS = {"baseline": 0, "ngram": 4, "draft": 4}  # k: vllm_server_num_speculative_tokens' default
TOLERANCE = 0.02  # prompts sized by /tokenize in whole words of a few tokens each: within 2 % of 128


def measured(vllm_pool, name, mode):
    run = vllm_pool(name)
    doc = run.run.mode_results("localhost", mode)
    assert doc["status"] == "complete", doc.get("error")
    return run, doc


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_the_playbook_launches_sweeps_and_leaves_nothing_running(vllm_pool, name, mode):
    run, doc = measured(vllm_pool, name, mode)
    assert run.run.rc == 0, run.run.stdout[-4000:]
    assert doc["engine"] == "vllm" and doc["server"]["engine"] == "vllm"
    assert doc["server"]["version"] == "0.32.0"
    assert "vllm.entrypoints.openai.api_server" in " ".join(doc["server"]["command"])
    assert (doc["server"]["speculative_algorithm"] is not None) == (mode != "baseline")
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4, 16]
    for level in doc["levels"]:
        assert level["error"] is None and level["requests_ok"] > 0 and level["requests_failed"] == 0, level
        assert level["output_tokens_mean"] == 64
    # The teardown: the mode's server and everything in its session are gone, VLLM:: included.
    sid = doc["server"]["pgid"]
    assert not vllmkit.session_processes(sid), vllmkit.session_processes(sid)
    assert not [p for p in vllmkit.vllm_titled() if p[0] in {q for q, unused in vllmkit.session_processes(sid)}]
    assert doc["server"]["pid"] in [k["pid"] for k in doc["gpu"]["killed_after"]]


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_each_level_records_its_window_in_utc_with_milliseconds(vllm_pool, name, mode):
    """Each UTC edge is its monotonic edge moved by the wall clock's offset read there, rounded to
    1 ms (their difference: within 1 ms), and window_s and the step between the two offsets are each
    recorded rounded to 1 ms (0.5 ms each): the edges' difference is the window plus that step to
    within 2 ms (a VM paused for a snapshot while CI ran once moved the wall clock 27 s inside a
    level: the step is what lets the edges still bound it)."""
    for level in measured(vllm_pool, name, mode)[1]["levels"]:
        start, end = vllmkit.utc_edge(level["window_start_utc"]), vllmkit.utc_edge(level["window_end_utc"])
        assert end - start == pytest.approx(level["window_s"] + level["window_utc_step_s"], abs=0.0021)


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_client_throughput_agrees_with_the_servers_generation_counter(vllm_pool, name, mode):
    """The client's tokens over each window against vLLM's own vllm:generation_tokens_total over
    the same window, read by the test's scraper. No percentage: the server's count is bounded by
    the scrapes either side of each edge (Scraper.bounds), the client's may differ from it by the
    tokens in flight at each edge (vllmkit.in_flight_tokens: C x 2 x (k + 1), k = 4 when
    speculating), by what vLLM counted before an edge and the client read after it (the chunks of the
    first two reads after the edge, the level's edge_chunk_tokens) and by rounding. The client's own scrapes bound the
    same count: the two bounds overlap, and the client's estimate lies inside its own."""
    run, doc = measured(vllm_pool, name, mode)
    for level in doc["levels"]:
        server = run.scraper.over(level)
        vllmkit.assert_client_count_within_server_bounds(level, server, SPEC_TOKENS[mode])
        vllmkit.assert_overlap("generated tokens", level, level["server_generated_tokens_bounds"], server["generated"])
        low, high = level["server_generated_tokens_bounds"]
        assert low - 0.1 <= level["server_generated_tokens"] <= high + 0.1


@pytest.mark.parametrize(("name", "mode"), [case for case in CASES if case.values[0] != "bench"])
def test_prompts_hold_input_len_of_the_servers_tokens(vllm_pool, name, mode):
    """Synthesized prompts (the bench run reads a prompts file instead: its own lengths)."""
    for level in measured(vllm_pool, name, mode)[1]["levels"]:
        assert level["input_tokens_mean"] == pytest.approx(128, rel=TOLERANCE), level["prompt_calibration"]
        assert level["prompt_calibration"]["source"].startswith("POST /tokenize")


@pytest.mark.parametrize(("name", "mode"), SPECULATIVE)
def test_accept_length_is_the_counters_over_the_window(vllm_pool, name, mode):
    """Accept length 1 + delta(accepted) / delta(drafts) over the window: the client's figure lies
    inside the bounds its own scrapes allow, and those overlap the bounds of the test's scrapes
    (each counter's extremes at each edge, so no tolerance is needed)."""
    run, doc = measured(vllm_pool, name, mode)
    bounded = []
    for level in doc["levels"]:
        server = run.scraper.over(level)
        counted = server["accept_length"]
        if counted[1] != float("inf"):
            bounded.append(level["concurrency"])
        mine = level["accept_length_bounds"]
        assert mine[0] - 1e-4 <= level["accept_length"] <= mine[1] + 1e-4, level["concurrency"]
        vllmkit.assert_overlap("accept length", level, mine, counted)
        assert level["accept_length_source"].startswith("/metrics spec_decode counters")
        if mode == "ngram":
            assert level["accept_length"] > 1.5  # a random model loops under greedy decoding: drafts land
    # A level whose edges the test's scrapes could not resolve (vLLM's API server answered nothing
    # near an edge: 12 s once, on a loaded CI machine) is checked from below only; at least one
    # level of every run is checked on both sides.
    assert bounded, [run.scraper.over(level)["coverage"] for level in doc["levels"]]


def test_the_baseline_reports_no_accept_length(vllm_pool):
    run, doc = measured(vllm_pool, "compare", "baseline")
    for level in doc["levels"]:
        assert level["accept_length"] is None and "accept_length" not in run.scraper.over(level)


def test_per_category_accept_length_on_the_real_engine(vllm_pool):
    """The bench run's prompts (two_categories.jsonl) are two categories of 12 prompts each,
    chosen once against the tiny model (random weights, fixed seed) under n-gram: "repetitive",
    prompts whose greedy continuation repeats from its first tokens ("copcopcop..."), and
    "varied", prompts whose continuation wanders first (n-gram drafts from the context miss).
    At their choice they gave 4.43 and 1.77-2.27 tokens per step at C=1, 4.45 and 2.10 at C=16.
    A random model copies nothing from its prompt, so it is the continuation's own repetition that
    the n-gram proposer finds. Each level's per-category figure is vLLM's own per request
    (metrics.speculative_decoding: 1 + accepted / steps), summed over the requests that finished
    in the window: the repetitive category's is higher at every level whose window holds both (the
    categories alternate in the prompt order, so C=16's does; at C=1 on a loaded CPU a window may
    hold a single request), and the two categories carry the level's tokens between them."""
    doc = measured(vllm_pool, "bench", "ngram")[1]
    assert doc["settings"]["prompt_set"]["categories"] == {"repetitive": 12, "varied": 12}
    both = 0
    for level in doc["levels"]:
        cats = {c["category"]: c for c in level["categories"]}
        assert set(cats) == {"repetitive", "varied"}, level["categories"]
        assert abs(sum(c["throughput_share"] for c in cats.values()) - 1) < 1e-3  # shares rounded to 4 digits
        assert "metrics.speculative_decoding per request" in level["categories_source"]
        measured_here = [c for c in cats.values() if c["verify_steps"] > 0]
        assert all(c["accept_length"] is not None for c in measured_here), cats
        if len(measured_here) == 2:  # a window holds a few requests at C=1 on a slow CPU: maybe one category
            both += 1
            assert cats["repetitive"]["accept_length"] > cats["varied"]["accept_length"], (level["concurrency"], cats)
    assert both >= 1, doc["levels"]  # the prompts alternate (prompts.order): C=16's window holds both

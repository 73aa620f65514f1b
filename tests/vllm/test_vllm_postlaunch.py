"""The post-launch check and the results' sources on a real vLLM (CPU build, tiny model), issue 18:
the ngram mode drafts (its spec-decode counters rise over the check's completion), the record and
the results file say so, and each level names where its accept length and token counts came from.
One launch of bench.yml at C=1 with a short window (about a minute, most of it vLLM's start)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def ngram(vllm_run):
    return vllm_run("postlaunch-ngram", "bench.yml", {"mode": "ngram", "bench_api": "completions",
                                                      "bench_concurrency": [1], "bench_window_s": 4})


def test_ngram_passes_the_post_launch_check_and_it_is_on_record(ngram):
    assert ngram.run.rc == 0, ngram.run.stdout[-4000:]
    check = ngram.record["post_launch_check"]
    assert check["engine"] == "vllm" and check["ok"], check
    running = check["running"]
    assert running["spec_decode_drafts_after"] > (running["spec_decode_drafts_before"] or 0)
    doc = ngram.run.mode_results("localhost", "ngram")
    assert doc["server"]["post_launch_check"] == check


def test_levels_name_their_accept_length_and_token_count_sources(ngram):
    doc = ngram.run.mode_results("localhost", "ngram")
    for level in doc["levels"]:
        assert level["accept_length_source"].startswith("/metrics spec_decode counters"), level
        assert level["token_count_source"].startswith("usage in every chunk"), level
        assert "server_count_check" not in level  # vLLM counts every step: the rate is compared

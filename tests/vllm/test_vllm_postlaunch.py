"""The post-launch check and the results' sources on a real vLLM (CPU build, tiny model), issue 18:
a speculative mode drafts (its spec-decode counters rise over the check's completion), the plain
mode does not, the record and the results file say so, and each level names where its accept
length and token counts came from. Read from the session pool's runs (conftest.POOL): no launch
of its own."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_ngram_passes_the_post_launch_check_and_it_is_on_record(vllm_pool):
    ngram = vllm_pool("bench")  # bench.yml, ngram: its node's record is this launch's
    assert ngram.run.rc == 0, ngram.run.stdout[-4000:]
    check = ngram.record["post_launch_check"]
    assert check["engine"] == "vllm" and check["ok"], check
    running = check["running"]
    assert running["spec_decode_drafts_after"] > (running["spec_decode_drafts_before"] or 0)
    doc = ngram.run.mode_results("localhost", "ngram")
    assert doc["server"]["post_launch_check"] == check


@pytest.mark.parametrize("mode", ["baseline", "ngram", "draft"])
def test_every_compared_mode_records_a_passing_check(vllm_pool, mode):
    doc = vllm_pool("compare").run.mode_results("localhost", mode)
    check = doc["server"]["post_launch_check"]
    assert check["engine"] == "vllm" and check["ok"], check


@pytest.mark.parametrize("name", ["bench", "compare"])
def test_levels_name_their_accept_length_and_token_count_sources(vllm_pool, name):
    doc = vllm_pool(name).run.mode_results("localhost", "ngram")
    for level in doc["levels"]:
        assert level["accept_length_source"].startswith("/metrics spec_decode counters"), level
        assert level["token_count_source"].startswith("usage in every chunk"), level
        assert "server_count_check" not in level  # vLLM counts every step: the rate is compared


def test_the_probe_reads_what_real_vllm_runs_and_the_mode_check_holds_it(vllm_pool):
    """Issue 36, item 7, on the pool's real servers (no launch of its own): each mode's probe read
    whether the server drafts and how many tokens from /metrics alone (vllm:spec_decode_* exist only
    with speculation on; the per-position counter has one child per draft token, registered at start:
    vllm/v1/spec_decode/metrics.py), and the mode check, run as bench.yml runs it against an external
    server, refuses plain decoding filed as a speculative mode and the reverse, naming both. The method
    itself is not served without VLLM_SERVER_DEV_MODE=1: n-gram and draft model read alike, said so."""
    from ansible_collections.specbench.core.plugins.module_utils.specbench_client import modecheck

    servers = {mode: vllm_pool("compare").run.mode_results("localhost", mode)["server"]
               for mode in ("baseline", "ngram", "draft")}
    assert servers["baseline"]["speculation"]["algorithm"] is None
    for mode in ("ngram", "draft"):
        spec = servers[mode]["speculation"]
        assert spec["algorithm"] == modecheck.METHOD_NOT_SERVED and spec["num_draft_tokens"] == 4, spec
    for asked in ("baseline", "ngram", "draft"):
        for running, server in servers.items():
            out = modecheck.check(asked, server)
            assert out["checked"] and out["ok"] is ((asked == "baseline") == (running == "baseline")), (asked, out)
            if not out["ok"]:
                assert f"mode {asked} asks for" in out["message"] and "runs " in out["message"]

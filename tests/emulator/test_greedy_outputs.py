"""Outputs unchanged by speculation, on a live emulator: the client's output match (the fixed greedy
prompts compare.yml sends before each mode's sweep) against baseline and speculative emulators.

Greedy verification keeps the target model's argmax (SGLang, srt/speculative/eagle_utils.py), so a
speculative mode must give the baseline's exact tokens; --emulator-output-mismatch injects the
confounder. Deterministic: the tokens are a function of the prompt and --emulator-seed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.specbench.core.plugins.module_utils.specbench_client import (  # noqa: E402
    collect_outputs,
    normalize_settings,
)
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import compare_outputs  # noqa: E402

LLAMA = ["--emulator-profile", "llama-3.1-8b-1x-h100"]
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "test/draft"]


def outputs(emu, api: str, count: int = 4, tokens: int = 16) -> dict:
    settings = normalize_settings({"base_url": emu.base_url, "api": api, "input_len": 32, "output_len": tokens})
    return collect_outputs(settings, "test/model", count, tokens)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from specbench_testkit import Emulator

    tmp = tmp_path_factory.mktemp("match")
    started = [Emulator(tmp, [*LLAMA, *args], 0.05, False)
               for args in ([], EAGLE3, [*EAGLE3, "--emulator-output-mismatch", "1"])]
    try:
        for emu in started:
            emu.wait_ready()
        yield dict(zip(("baseline", "eagle3", "broken"), started, strict=True))
    finally:
        for emu in started:
            emu.stop()


@pytest.mark.parametrize("api", ["chat", "completions", "native"])
def test_speculative_mode_gives_the_baselines_exact_tokens(servers, api):
    base, spec = outputs(servers["baseline"], api), outputs(servers["eagle3"], api)
    assert base["source"] == "token_ids" and base["api"] == api
    assert [len(o["token_ids"]) for o in base["outputs"]] == [16] * 4
    assert len({tuple(o["token_ids"]) for o in base["outputs"]}) == 4  # each prompt its own output
    assert [o["token_ids"] for o in spec["outputs"]] == [o["token_ids"] for o in base["outputs"]]
    match = compare_outputs(base, spec)
    assert (match["status"], match["share"], match["matched"]) == ("ok", 1.0, 4)


def test_an_injected_mismatch_shows_with_its_first_position(servers):
    base, broken = outputs(servers["baseline"], "native"), outputs(servers["broken"], "native")
    match = compare_outputs(base, broken)
    assert match["status"] == "below_min" and match["share"] == 0.0
    for item in match["mismatches"]:
        b = base["outputs"][item["index"]]["token_ids"]
        o = broken["outputs"][item["index"]]["token_ids"]
        pos = item["first_difference"]
        assert b[:pos] == o[:pos] and b[pos] != o[pos]

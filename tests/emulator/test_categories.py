"""Per-category acceptance in the emulator: each profile gives every category of the built-in
prompt set its own acceptance, and the emulator learns a request's category from its prompt
text only (profiles.category_of), as a real server would have to. One short client run on the
default chat API shows the per-category accept lengths it reports, from each request's
sglext.spec_tokens_details (asked for with return_spec_tokens_details, as SGLang 0.5.23 serves it)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from ansible_collections.specbench.core.plugins.module_utils.specbench_client import prompts as ps
from ansible_collections.specbench.core.plugins.module_utils.specbench_client import prompts_builtin
from sglang_emulator import model
from sglang_emulator.profiles import CATEGORY_ACCEPT_Q, CATEGORY_OPENINGS, PROFILES, category_of

PROFILE = "kimi-k2.5-8x-rtx-pro-6000"

# The benchmark client from its package folder (the node runs the same cli.main() from its zipapp).
CLIENT = [sys.executable, "-c", "import sys; from specbench_client.cli import main; sys.exit(main())"]


def test_the_emulator_reads_the_built_in_sets_category_from_the_text():
    assert CATEGORY_OPENINGS == prompts_builtin.OPENINGS
    for record in prompts_builtin.records():
        text = record["messages"][0]["content"]
        assert category_of(text) == record["category"]
        assert category_of(ps.flatten([{"role": "user", "content": text}])) == record["category"]
    assert category_of("time person year way") is None  # synthesized prompts: the profile's own acceptance
    for profile in PROFILES:  # every profile has a table for every category and algorithm
        table = CATEGORY_ACCEPT_Q[profile]
        assert set(table) == set(CATEGORY_OPENINGS)
        assert all(set(row) == set(PROFILES[profile]["spec"]) for row in table.values())


def test_per_category_accept_length_from_the_emulator(emulator, tmp_path):
    """EAGLE3 with 3 steps, top-k 1: each category's accept length is sum(q^j, j=0..3) of its own
    q. Bound: a verify step gives 1..4 tokens (standard deviation at most 1.5), so a category's mean
    over S steps has a standard error of at most 1.5 / sqrt(S); the test allows 4 of them."""
    emu = emulator("--emulator-profile", PROFILE, "--tp-size", "8", "--speculative-algorithm", "EAGLE3",
                   "--speculative-draft-model-path", "test/draft", "--speculative-num-steps", "3",
                   "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
    out = tmp_path / "out.json"
    subprocess.run([*CLIENT, "--base-url", emu.base_url, "--api", "chat",
                    "--concurrency", "6", "--warmup-s", "1", "--window-s", "2", "--output-len", "32",
                    "--prompts-file", "builtin", "--output", str(out)],
                   cwd=str(ps.__file__).rsplit("/specbench_client/", 1)[0], check=True, capture_output=True,
                   timeout=120)
    level = json.loads(out.read_text())["levels"][0]
    cats = {c["category"]: c for c in level["categories"]}
    assert "sglext.spec_tokens_details.spec_verify_ct per request" in level["categories_source"]
    assert level["accept_length_source"].startswith("chat API per request: sum(completion_tokens) / sum(spec_verify_ct)")
    assert set(cats) == set(CATEGORY_OPENINGS)
    assert abs(sum(c["throughput_share"] for c in cats.values()) - 1) < 1e-3  # shares rounded to 4 digits
    for name, cat in cats.items():
        expected = model.mean_accept_length(CATEGORY_ACCEPT_Q[PROFILE][name]["EAGLE3"], 3)
        bound = 4 * 1.5 / math.sqrt(cat["verify_steps"])
        assert abs(cat["accept_length"] - expected) <= bound, (name, cat, expected, bound)
    assert cats["code"]["accept_length"] > cats["translation"]["accept_length"]

"""The serve proof shows the window's accept length only where the plan speculates, never the
server's lifetime figure (issue 38, minor): the client gives none over a window whose counters
counted no speculative step, the proof's rows give none (labelled) where the plan is off or only the
lifetime figure was had, and report.md's Served table labels each. Pure computation (< 1 s)."""

from __future__ import annotations

from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep
from ansible_collections.specbench.core.plugins.module_utils.specbench_client import engines, format_level_line
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.level import accept_length_of
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.summary import NO_SPEC_STEP_NOTE
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare.serve_proof import (
    ACCEPT_LIFETIME,
    ACCEPT_OFF,
)

# What the client writes when it had only SGLang's /server_info figure (level.accept_length_of's last source).
LIFETIME = ("/server_info avg_spec_accept_length after the repeat, mean over 1 of 1 DP ranks: lifetime since "
            "/flush_cache, folded in only every --decode-log-interval decode batches, so not exactly the window")
WINDOW = "/metrics over the window: delta(sglang:generation_tokens_total) / delta(sglang:spec_verify_calls_total)"


def sglang_level(counted_verify_calls, lifetime=3.1):
    """accept_length_of on an SGLang chat level whose requests brought no spec_tokens_details and
    whose /metrics counters over the window counted ``counted_verify_calls`` (None: no /metrics)."""
    raws = [{"ws": None, "window_end": None, "spec_ct": 0, "spec_verify": 0, "metrics": {}}]
    lv = dict(level(64, 800.0), server_spec_drafts=None, server_spec_verify_calls=counted_verify_calls)
    found = accept_length_of(raws, lv, {"api": "chat", "flush_cache": True}, engines.for_server({"engine": "sglang"}),
                             True, [{"value": lifetime, "ranks": 1, "of": 1, "path": "/server_info"}], True)
    lv.update(found)
    return lv


def test_the_client_gives_no_lifetime_figure_over_a_window_that_counted_no_speculative_step():
    off = sglang_level(0.0)
    assert off["accept_length"] is None and off["accept_length_source"] is None
    assert off["accept_length_note"] == NO_SPEC_STEP_NOTE
    assert "accept - (no speculative step counted over the window)" in format_level_line(off)
    # Without counters over the window the lifetime figure is all there is: given, and labelled so.
    blind = sglang_level(None)
    assert blind["accept_length"] == 3.1 and "lifetime since /flush_cache" in blind["accept_length_source"]
    assert "accept 3.10 (the server's lifetime figure, not this window's)" in format_level_line(blind)
    # A window figure reads as before.
    line = format_level_line(dict(level(16, 500.0), accept_length=2.4, accept_length_source=WINDOW))
    assert " | accept 2.40 | " in line


def test_the_proof_shows_the_windows_accept_length_only_where_the_plan_speculates():
    results = {"baseline": result("baseline", [level(c, 100.0 * c) for c in (1, 16, 64)]),
               "eagle3": result("eagle3", [level(c, 120.0 * c, accept=2.4) for c in (1, 16, 64)])}
    served_levels = [
        # C=1: the plan speculates, the window's own figure.
        dict(level(1, 120.0), accept_length=2.45, accept_length_source=WINDOW, server_spec_verify_calls=40.0),
        # C=16: the plan speculates, but the client had only the server's lifetime figure (no /metrics).
        dict(level(16, 1900.0), accept_length=2.9, accept_length_source=LIFETIME, server_spec_verify_calls=None),
        # C=64: the adaptive table is off here; the server still reports its lifetime 3.70.
        dict(level(64, 6400.0), accept_length=3.7, accept_length_source=LIFETIME, server_spec_verify_calls=0.0),
    ]
    served = result("eagle3-adaptive", served_levels)
    refs = {1: "eagle3", 16: "eagle3", 64: "baseline"}
    rows = cmp.proof_rows(served, results, 0.1, references=refs)
    got = [(r["concurrency"], r["plan_speculates"], r["accept_length"], r["accept_length_note"]) for r in rows]
    assert got == [(1, True, 2.45, None), (16, True, None, ACCEPT_LIFETIME),
                   (64, False, None, ACCEPT_OFF)]
    assert rows[0]["accept_length_source"] == WINDOW
    # Off by the plan wins over whatever the level says; a window that counted nothing says so.
    served_levels[2].update(accept_length=None, accept_length_source=None, accept_length_note=NO_SPEC_STEP_NOTE)
    served_levels[1].update(accept_length=None, accept_length_source=None, accept_length_note=NO_SPEC_STEP_NOTE)
    again = cmp.proof_rows(served, results, 0.1, references=refs)
    assert [r["accept_length_note"] for r in again] == [None, NO_SPEC_STEP_NOTE, ACCEPT_OFF]

    doc = {"mode": "eagle3-adaptive", "state": "served", "base_url": "http://127.0.0.1:30000", "run_id": "run-1",
           "verified": True, "text": "verified: fine", "service": {"launcher": "session", "pid": 7},
           "launch_command": ["python3", "-m", "sglang.launch_server"], "levels": rows}
    text = "\n".join(rep._served_section(doc))
    table = {int(line.split("|")[1]): line for line in text.splitlines() if line.startswith("| ") and
             line.split("|")[1].strip().isdigit()}
    assert "accept length (this window)" in text
    assert table[1].rstrip().endswith("| 2.45 |")
    assert table[16].rstrip().endswith("| none (the server gave only its lifetime figure) |")
    assert table[64].rstrip().endswith("| none (speculation off here by the plan) |")
    assert "3.70" not in text and "2.90" not in text
    doc["levels"] = again
    assert "none (no speculative step counted over the window)" in "\n".join(rep._served_section(doc))


def test_a_window_without_a_speculative_step_is_expected_of_an_adaptive_mode_and_named_for_a_static_one():
    def off(conc):
        return dict(level(conc, 100.0 * conc), accept_length=None, accept_length_note=NO_SPEC_STEP_NOTE)

    results = {"baseline": result("baseline", [level(c, 100.0 * c) for c in (1, 64)]),
               "eagle3": result("eagle3", [level(1, 130.0, accept=2.4), off(64)]),
               "eagle3-adaptive": result("eagle3-adaptive", [level(1, 130.0, accept=2.4), off(64)])}
    kinds = {(c["kind"], c.get("mode")) for c in cmp.confounders(results, "baseline")}
    assert ("no_speculative_step", "eagle3") in kinds
    assert not {k for k in kinds if k[1] == "eagle3-adaptive"}, kinds  # off there, as its table says
    assert not {k for k in kinds if k[0] == "accept_length_missing"}, kinds

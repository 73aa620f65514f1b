"""SGLang's defaulting rules as the emulator resolves them (no server started)."""

from __future__ import annotations

import json

import pytest

from sglang_emulator.cli import StartupError, build_parser, resolve


def resolved(*flags: str):
    args = build_parser().parse_args(["--model-path", "org/model", *flags])
    return args, resolve(args)


def test_adaptive_reads_sglangs_file_format_and_picks_the_middle_candidate(tmp_path):
    table = {"1": {"candidate_steps": [1, 3, 5]}, "16": {"candidate_steps": [0, 1]}, "ema_alpha": 0.2}
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(table))
    args, cfg = resolved(
        "--tp-size",
        "8",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "d",
        "--speculative-adaptive",
        "--speculative-adaptive-config",
        str(path),
    )
    spec = cfg["spec"]
    assert spec.adaptive_table == ((1, (1, 3, 5)), (16, (0, 1)))
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (3, 1, 4)
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)


def test_adaptive_config_is_a_path_not_inline_json():
    with pytest.raises(StartupError, match="JSON file's path"):
        resolved(
            "--tp-size",
            "8",
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            "d",
            "--speculative-adaptive",
            "--speculative-adaptive-config",
            '{"1": {"candidate_steps": [1]}}',
        )


def test_adaptive_falls_back_to_static_steps_with_topk_above_one():
    args, cfg = resolved(
        "--tp-size",
        "8",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "d",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "4",
        "--speculative-num-draft-tokens",
        "8",
        "--speculative-adaptive",
    )
    assert cfg["spec"].adaptive_table is None
    # SGLang's own words (srt/arg_groups/speculative_hook.py), and /server_info says it is off.
    assert ("speculative_adaptive disabled: speculative_eagle_topk=4 (only topk=1 is supported). Falling back to "
            "static speculative params.") in cfg["warnings"]
    assert args.speculative_adaptive is False


def test_nextn_uses_the_model_path_as_its_draft():
    args, cfg = resolved("--tp-size", "8", "--speculative-algorithm", "NEXTN")
    assert cfg["spec"].algorithm == "EAGLE" and args.speculative_draft_model_path == "org/model"


def test_ngram_takes_draft_tokens_alone():
    args, cfg = resolved("--tp-size", "8", "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8")
    assert cfg["spec"].num_draft_tokens == 8 and cfg["spec"].num_steps == 7
    _unused1, cfg = resolved("--tp-size", "8", "--speculative-algorithm", "NGRAM")
    assert cfg["spec"].num_draft_tokens == 12
    # /server_info reports what SGLang resolves (speculative_hook.py, _handle_ngram): top-k the BFS
    # breadth (10 by default), steps draft tokens // top-k; the acceptance model keeps its chain
    assert (args.speculative_eagle_topk, args.speculative_num_steps) == (10, 0)
    args, cfg = resolved("--tp-size", "8", "--speculative-algorithm", "NGRAM")
    assert (args.speculative_eagle_topk, args.speculative_num_steps, args.speculative_num_draft_tokens) == (10, 1, 12)
    assert cfg["spec"].num_steps == 11
    args, _unused2 = resolved("--tp-size", "8", "--speculative-algorithm", "NGRAM", "--speculative-ngram-max-bfs-breadth",
                              "4", "--speculative-num-draft-tokens", "8")
    assert (args.speculative_eagle_topk, args.speculative_num_steps) == (4, 2)


def test_resolved_values_are_reported():
    args, cfg = resolved("--tp-size", "8", "--speculative-algorithm", "eagle3", "--speculative-draft-model-path", "d")
    assert args.served_model_name == "org/model"
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    assert args.max_running_requests == 48 and args.mem_fraction_static == pytest.approx(0.78, abs=0.03)


def test_weights_that_do_not_fit_fail_like_sglang():
    with pytest.raises(StartupError, match="Not enough memory"):
        resolved("--tp-size", "2")


def test_each_launch_draws_its_own_speed_factor_seeded_and_documented():
    """--emulator-launch-sd (issue 36): one factor exp(N(0, sd)) per launch on every modelled duration, so that
    launch-to-launch variation can be tested end to end; a seed makes it reproducible, none draws afresh."""
    args, unused = resolved("--tp-size", "8", "--emulator-launch-sd", "0.03", "--emulator-launch-seed", "7")
    again, unused = resolved("--tp-size", "8", "--emulator-launch-sd", "0.03", "--emulator-launch-seed", "7")
    other, unused = resolved("--tp-size", "8", "--emulator-launch-sd", "0.03", "--emulator-launch-seed", "8")
    assert args.emulator_launch_factor == again.emulator_launch_factor != other.emulator_launch_factor
    assert 0.85 < args.emulator_launch_factor < 1.15
    factors = {resolved("--tp-size", "8", "--emulator-launch-sd", "0.03")[0].emulator_launch_factor for _n in range(5)}
    assert len(factors) == 5  # unseeded: a fresh draw each launch
    assert resolved("--tp-size", "8")[0].emulator_launch_factor == 1.0  # the default: the profile's speed
    with pytest.raises(StartupError, match="--emulator-launch-sd"):
        resolved("--tp-size", "8", "--emulator-launch-sd", "0.9")

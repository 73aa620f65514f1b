"""Named performance profiles: one node and model each, calibrated to published figures.

Times are seconds of model time (``--emulator-time-scale`` stretches or shrinks them).
``accept_q`` is the per-draft-token acceptance probability of each algorithm; draft costs
``e0`` (per draft step) and ``e1`` (per request and branch per draft step) are the draft
model's. See model.py for what each constant means. Figures below are the model's own
steady state with 256 input and 256 output tokens (the benchmark's defaults).
"""

from __future__ import annotations

PROFILES: dict[str, dict] = {
    # The seeds: Kimi-K2.5 INT4 on 8 x RTX PRO 6000 Blackwell (PCIe Gen5, no NVLink).
    # Baseline 92.6 tok/s and EAGLE-3 96.1 tok/s at concurrency 1; with
    # --max-running-requests unset EAGLE-3 is capped at 48 running and flattens near
    # 340 tok/s from concurrency 70. The same roofline puts the crossover near C = 1.3:
    # on this PCIe node EAGLE-3 barely pays even for one stream.
    # The seeds measured the baseline at C = 1 only: every baseline figure beyond C = 1 (and so
    # the crossover itself) is this roofline's extrapolation, not a measurement.
    "kimi-k2.5-8x-rtx-pro-6000": {
        "description": "Kimi-K2.5 INT4, 8 x RTX PRO 6000 Blackwell, PCIe (the seeds)",
        "model_path": "moonshotai/Kimi-K2.5",
        "architectures": ["DeepseekV3ForCausalLM"],
        "context_length": 262144,
        "gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "gpu_memory_total_mib": 97887,
        "default_tp_size": 8,
        "weights_mib_per_gpu": 72000,  # at tp 8; scales as 8 / tp
        "draft_weights_mib_per_gpu": 1200,
        "kv_kib_per_token_per_gpu": 8.6,  # MLA cache, 61 layers, spread over tp ranks
        "load_seconds": 4.0,
        "costs": {"t_fixed": 0.0020, "t_mem": 0.00875, "t_tok": 0.001335, "t_prefill_fixed": 0.0020, "t_prefill_tok": 0.00008},
        "draft_defaults": [3, 1, 4],  # SGLang's auto (steps, topk, draft) for non-Llama
        "spec": {
            "EAGLE3": {"accept_q": 0.60, "e0": 0.00370, "e1": 0.00020},
            "EAGLE": {"accept_q": 0.52, "e0": 0.00370, "e1": 0.00020},
            "STANDALONE": {"accept_q": 0.55, "e0": 0.00900, "e1": 0.00040},
            "NGRAM": {"accept_q": 0.30, "e0": 0.00030, "e1": 0.00002},
        },
    },
    # SGLang's speculative-decoding docs: Llama-3.1-8B-Instruct on one H100, MT-bench,
    # batch 1: no speculation 158 tok/s, EAGLE-3 373 tok/s (5 steps, top-k 4, 8 draft
    # tokens). The roofline puts the crossover near C = 51, by SGLang's adaptive default
    # (speculation off from batch 64).
    "llama-3.1-8b-1x-h100": {
        "description": "Llama-3.1-8B-Instruct, 1 x H100 80GB (SGLang's docs)",
        "model_path": "meta-llama/Llama-3.1-8B-Instruct",
        "architectures": ["LlamaForCausalLM"],
        "context_length": 131072,
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "gpu_memory_total_mib": 81559,
        "default_tp_size": 1,
        "weights_mib_per_gpu": 15320,
        "draft_weights_mib_per_gpu": 850,
        "kv_kib_per_token_per_gpu": 128.0,
        "load_seconds": 2.0,
        "costs": {"t_fixed": 0.0010, "t_mem": 0.00534, "t_tok": 0.000020, "t_prefill_fixed": 0.0010, "t_prefill_tok": 0.00001},
        "draft_defaults": [5, 4, 8],  # SGLang's auto for Llama
        "spec": {
            "EAGLE3": {"accept_q": 0.32, "e0": 0.000592, "e1": 0.000010},
            "EAGLE": {"accept_q": 0.24, "e0": 0.000592, "e1": 0.000010},
            "STANDALONE": {"accept_q": 0.28, "e0": 0.001500, "e1": 0.000030},
            "NGRAM": {"accept_q": 0.15, "e0": 0.000050, "e1": 0.000002},
        },
    },
    # A Kimi-like mixture of experts where verification pays for the experts it touches: 384
    # experts, 8 per token, so a pass over n tokens streams E(n) = 384 (1 - (1 - 8/384)^n) of
    # them (model.expert_union). At small batches the verify pass over b * 4 draft tokens reads
    # several times the experts plain decode reads and EAGLE-3 loses; from about C = 18 both
    # read nearly every expert and it pays; from about C = 85 the verify pass is compute-bound
    # and it loses again: a double crossing (256/256 tokens: 0.80 at C = 4, 1.25 at C = 32,
    # 0.77 at C = 128). Illustrative constants, not a measured node.
    "kimi-k2.5-moe": {
        "description": "Kimi-like MoE (384 experts, 8 per token), verification cost by experts touched (illustrative)",
        "model_path": "moonshotai/Kimi-K2.5",
        "architectures": ["DeepseekV3ForCausalLM"],
        "context_length": 262144,
        "gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "gpu_memory_total_mib": 97887,
        "default_tp_size": 8,
        "weights_mib_per_gpu": 72000,
        "draft_weights_mib_per_gpu": 1200,
        "kv_kib_per_token_per_gpu": 8.6,
        "load_seconds": 4.0,
        "costs": {"t_fixed": 0.0020, "t_mem": 0.0020, "t_tok": 0.0005, "t_prefill_fixed": 0.0020,
                  "t_prefill_tok": 0.00008, "moe_experts": 384, "moe_per_token": 8, "t_mem_experts": 0.080},
        "draft_defaults": [3, 1, 4],
        "spec": {
            "EAGLE3": {"accept_q": 0.70, "e0": 0.00200, "e1": 0.00001},
            "EAGLE": {"accept_q": 0.62, "e0": 0.00200, "e1": 0.00001},
            "STANDALONE": {"accept_q": 0.60, "e0": 0.00600, "e1": 0.00004},
            "NGRAM": {"accept_q": 0.30, "e0": 0.00030, "e1": 0.00002},
        },
    },
}

# Per-category acceptance: each profile's per-draft-token acceptance by category of request,
# algorithm by algorithm (the profile's ``spec`` accept_q is the uncategorised figure). The order
# follows the published pattern (EAGLE-3 paper and SGLang's docs: code and maths accept far more
# than open chat and translation; n-gram lives on text it can copy, so retrieval and summarisation
# from a long input do well). Illustrative values, not measurements.
CATEGORY_ACCEPT_Q: dict[str, dict[str, dict[str, float]]] = {
    "kimi-k2.5-8x-rtx-pro-6000": {
        "code": {"EAGLE3": 0.74, "EAGLE": 0.66, "STANDALONE": 0.68, "NGRAM": 0.38},
        "maths": {"EAGLE3": 0.70, "EAGLE": 0.62, "STANDALONE": 0.64, "NGRAM": 0.30},
        "summarisation": {"EAGLE3": 0.58, "EAGLE": 0.50, "STANDALONE": 0.54, "NGRAM": 0.45},
        "translation": {"EAGLE3": 0.45, "EAGLE": 0.38, "STANDALONE": 0.42, "NGRAM": 0.12},
        "open_chat": {"EAGLE3": 0.50, "EAGLE": 0.42, "STANDALONE": 0.46, "NGRAM": 0.15},
        "retrieval": {"EAGLE3": 0.60, "EAGLE": 0.52, "STANDALONE": 0.56, "NGRAM": 0.55},
    },
    "llama-3.1-8b-1x-h100": {
        "code": {"EAGLE3": 0.45, "EAGLE": 0.35, "STANDALONE": 0.40, "NGRAM": 0.22},
        "maths": {"EAGLE3": 0.42, "EAGLE": 0.32, "STANDALONE": 0.37, "NGRAM": 0.16},
        "summarisation": {"EAGLE3": 0.30, "EAGLE": 0.22, "STANDALONE": 0.27, "NGRAM": 0.25},
        "translation": {"EAGLE3": 0.22, "EAGLE": 0.16, "STANDALONE": 0.19, "NGRAM": 0.06},
        "open_chat": {"EAGLE3": 0.26, "EAGLE": 0.19, "STANDALONE": 0.23, "NGRAM": 0.08},
        "retrieval": {"EAGLE3": 0.32, "EAGLE": 0.24, "STANDALONE": 0.28, "NGRAM": 0.32},
    },
    "kimi-k2.5-moe": {
        "code": {"EAGLE3": 0.82, "EAGLE": 0.74, "STANDALONE": 0.72, "NGRAM": 0.38},
        "maths": {"EAGLE3": 0.78, "EAGLE": 0.70, "STANDALONE": 0.68, "NGRAM": 0.30},
        "summarisation": {"EAGLE3": 0.68, "EAGLE": 0.60, "STANDALONE": 0.58, "NGRAM": 0.45},
        "translation": {"EAGLE3": 0.55, "EAGLE": 0.48, "STANDALONE": 0.47, "NGRAM": 0.12},
        "open_chat": {"EAGLE3": 0.60, "EAGLE": 0.52, "STANDALONE": 0.50, "NGRAM": 0.15},
        "retrieval": {"EAGLE3": 0.70, "EAGLE": 0.62, "STANDALONE": 0.60, "NGRAM": 0.55},
    },
}

# How the emulator learns a request's category: from its own text, as a real server would have to.
# The built-in prompt set (plugins/module_utils/specbench_client/prompts_builtin.py, OPENINGS)
# opens every prompt of a category with the same words; a request whose prompt (the first user
# turn on chat, the text on completions and /generate, a flattened "User: " turn too) opens with
# one of these takes that category's acceptance, any other the profile's own. No header, no field:
# nothing a real SGLang would not see. tests/emulator/test_categories.py keeps the two in step.
CATEGORY_OPENINGS = {
    "code": "Write a Python function",
    "maths": "Solve step by step:",
    "summarisation": "Summarise the following text",
    "translation": "Translate into French:",
    "open_chat": "Let's chat:",
    "retrieval": "Read the documents below and answer",
}


def category_of(text: str) -> str | None:
    """The category a prompt's text opens with (CATEGORY_OPENINGS), or None."""
    head = text.lstrip()
    if head.startswith("User: "):
        head = head[6:]
    for name, opening in CATEGORY_OPENINGS.items():
        if head.startswith(opening):
            return name
    return None


DEFAULT_PROFILE = "kimi-k2.5-8x-rtx-pro-6000"

# SGLang's default --speculative-adaptive table: from batch size N, candidate step counts
# (0 is plain decode). Speculation is off from batch 64.
DEFAULT_ADAPTIVE_TABLE = {
    "1": {"candidate_steps": [1, 3, 5, 7]},
    "8": {"candidate_steps": [0, 1, 3]},
    "32": {"candidate_steps": [0, 1]},
    "64": {"candidate_steps": [0]},
}

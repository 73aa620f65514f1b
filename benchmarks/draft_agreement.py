"""Why the tiny draft model accepts so little: how often a noisy copy of the tiny target predicts
the target's own greedy token, and the accept length that agreement allows (computed on CPU with
transformers, the same models the real-engine checks serve; no server).

The tiny models of tests/vllm/make_models.py have random weights: their next-token logits are
nearly flat, so the margin between the top two tokens is small, and the draft's noise (each weight
plus 10% of its tensor's standard deviation) moves logits by more than that margin at many
positions. A draft that agrees with the target's greedy token with probability p at each position,
drafting k tokens a step, gives an accept length (tokens per verify step, the bonus token counted)
of E = 1 + p + p^2 + ... + p^k under greedy verification: SGLang's STANDALONE and vLLM's draft
model alike. This script measures p on the target's own greedy continuations of fixed prompts
(teacher-forced: the draft sees the target's tokens, as it does after every verify), for the noise
levels given, and prints p with a 95% interval (Wilson, by position; positions within one prompt
are correlated, so it is read as a guide, not a bound), the top-two margin of the target, and E
for k = 3 and 4 (the real servers' settings).

    .venv-vllm/bin/python benchmarks/draft_agreement.py [MODELS_DIR] [--noise 0.1 0.03 0.01 0]

MODELS_DIR defaults to tests/.tmp/vllm-models (made by tests/vllm/make_models.py). Every figure it
prints is computed.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))

PROMPTS = [
    "Explain how a kernel schedules threads on a machine with many cores.",
    "Write a short story about a lighthouse keeper and a storm.",
    "List the steps to rebuild a server after a disk failure.",
    "What are the terms of this license, and who may copy the software?",
    "Describe the weather in a city by the sea during winter.",
    "Summarise the rules of chess for a new player.",
    "How does a compiler turn source code into a program?",
    "Give advice to someone learning to cook at home.",
]


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def accept_length(p: float, k: int) -> float:
    return sum(p ** i for i in range(k + 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="?", default=os.path.join(ROOT, "tests", ".tmp", "vllm-models"))
    parser.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.03, 0.01, 0.0])
    parser.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt (the checks' output length)")
    args = parser.parse_args(argv)

    import make_models
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target_dir = os.path.join(args.models, "tiny")
    if not os.path.isdir(target_dir):
        print(f"no tiny model in {args.models}: run tests/vllm/make_models.py {args.models} first", file=sys.stderr)
        return 2
    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, torch_dtype=torch.bfloat16).eval()
    # The target's greedy continuation of each prompt, through its chat template as the checks send it.
    sequences = []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"]
            out = target.generate(ids, max_new_tokens=args.tokens, do_sample=False, min_new_tokens=args.tokens)
            sequences.append((ids.shape[1], out))
        margins = []
        for start, seq in sequences:
            logits = target(seq).logits[0, start - 1:-1].float()
            top2 = logits.topk(2, dim=-1).values
            margins += (top2[:, 0] - top2[:, 1]).tolist()
            spread = logits.std(dim=-1).mean().item()
    margins.sort()
    print(f"target: {len(margins)} greedy positions over {len(PROMPTS)} prompts; top-two logit margin median "
          f"{margins[len(margins) // 2]:.3f}, 10th percentile {margins[len(margins) // 10]:.3f}; logit sd per "
          f"position {spread:.3f} (computed)")
    for noise in args.noise:
        draft = make_models.model(tok, seed=0, noise=noise).eval()
        hits = n = 0
        with torch.no_grad():
            for start, seq in sequences:
                want = seq[0, start:]
                got = draft(seq).logits[0, start - 1:-1].argmax(dim=-1)
                hits += int((got == want).sum())
                n += int(want.numel())
        p = hits / n
        low, high = wilson(hits, n)
        print(f"noise {noise:g}: the draft predicts the target's greedy token at {hits}/{n} positions, p={p:.3f} "
              f"[{low:.3f}, {high:.3f}]; accept length (bonus token counted) k=3 {accept_length(p, 3):.2f} "
              f"[{accept_length(low, 3):.2f}, {accept_length(high, 3):.2f}], k=4 {accept_length(p, 4):.2f} "
              f"(computed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

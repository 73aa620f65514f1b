"""Train an EAGLE-3 draft head for the tiny target of tests/vllm/make_models.py, on this CPU, in
minutes, in the checkpoint format SGLang loads (no hub access, no GPU).

    PYTHON tests/sglang_cpu/make_eagle3_head.py MODELS [--out DIR] [--steps N] [--seqs N]

PYTHON is any venv with torch, transformers and safetensors (the real-SGLang venv has them).
MODELS/tiny is the target; the head is written to MODELS/tiny-eagle3 (or --out) and the script
prints one line: the head's agreement with the target's greedy tokens on held-out prompts and
the accept length that allows at 3 draft steps (computed on CPU, no server).

What SGLang expects, read from its own source (sglang 0.5.18):

* ``sglang/srt/models/llama_eagle3.py`` (``LlamaForCausalLMEagle3``): one decoder layer whose
  q/k/v take ``cat(input_layernorm(embed(token)), hidden_norm(hidden))`` (2 x hidden), ``fc``
  projecting the target's three captured hidden states (3 x hidden -> hidden) on the first draft
  step only (later steps feed the layer's own pre-norm output back, which already has the hidden
  size), a final ``norm``, and its own ``lm_head`` over ``draft_vocab_size`` tokens with ``d2t``
  (draft id -> target id offsets: ``hot_token_id = d2t + arange``). Weight names as EAGLE-3's
  reference checkpoints write them: ``fc.*``, ``midlayer.*`` (read as ``layers.0``), ``norm.*``,
  ``lm_head.*``, ``d2t``, ``t2d``. The token embedding is the target's (the EAGLE worker sets it).
* ``sglang/srt/models/llama.py`` (``set_eagle3_layers_to_capture``): for layer ids L the target
  captures ``hidden + residual`` at the input of layers L + 1, i.e. the residual stream after
  layers L; ``eagle_config.eagle_aux_hidden_state_layer_ids`` in the head's config.json names them
  (``model_runner_components/spec_aux_hidden_state.py``). Without it SGLang picks
  ``[2, n // 2, n - 3]``, which for a 4-layer target is ``[2, 2, 1]``: this head names ``[0, 1, 2]``.

How it is trained (EAGLE-3's recipe, scaled down): the target's own greedy continuations of
corpus windows in its chat template (the licence texts make_models.py trains the tokenizer on),
teacher-forced through the target (its bf16 weights computed in float32) for its captured hidden states
and its greedy token at every position; the head learns to predict that token one, two and three
positions ahead, each later step fed the head's own output and attending to the first step's keys
up to its base position and to its own chain (training-time test). A later step's loss counts
only where the chain's tokens are the target's own greedy tokens: that is the only case in which
a greedy verifier reaches that step. The draft vocabulary is the most frequent target tokens
(covering the targets' choices on the training data); the rest cannot be drafted.

Held out: the evaluation prompts are the benchmark's built-in prompts (plugins/module_utils/
specbench_client/prompts_builtin.py), never trained on.

Idempotent: a head folder with config.json and model.safetensors is kept.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LAYER_IDS = [0, 1, 2]  # residual stream after target layers 0, 1 and 2 (of 4)
DRAFT_STEPS = 3  # training-time-test depth: the steps SGLang drafts here
PROMPT_TOKENS = 40
NEW_TOKENS = 64
CROP = 64  # positions per training window


def builtin_prompts() -> list[str]:
    """The benchmark's own built-in prompts (held out from training)."""
    path = os.path.join(ROOT, "plugins", "module_utils", "specbench_client", "prompts_builtin.py")
    scope: dict = {}
    with open(path, encoding="utf-8") as handle:
        exec(compile(handle.read(), path, "exec"), scope)  # pylint: disable=exec-used
    return [rec["messages"][-1]["content"] if "messages" in rec else rec.get("prompt", "")
            for rec in scope["records"]()]


def corpus_windows(tok, count: int, seed: int) -> list[list[int]]:
    texts = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                texts.append(handle.read())
    ids = [tok(text, add_special_tokens=False)["input_ids"] for text in texts or ["the quick brown fox " * 400]]
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        doc = rng.choice([d for d in ids if len(d) > PROMPT_TOKENS + 1])
        start = rng.randrange(0, len(doc) - PROMPT_TOKENS)
        out.append(doc[start:start + PROMPT_TOKENS])
    return out


def chat_ids(tok, body: list[int]) -> list[int]:
    """The chat template around a user message given as token ids (make_models.py's template)."""
    head = tok("<|user|>\n", add_special_tokens=False)["input_ids"]
    tail = tok("</s>\n<|assistant|>\n", add_special_tokens=False)["input_ids"]
    return head + body + tail


def target_pass(target, batch):
    """Greedy continuation, then one teacher-forced pass: captured hidden states and the target's
    greedy token at every position."""
    import torch

    with torch.no_grad():
        ids = torch.tensor(batch)
        out = target(ids, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        gen = [nxt]
        for _ in range(NEW_TOKENS - 1):
            out = target(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            gen.append(nxt)
        seq = torch.cat([ids] + gen, dim=1)
        full = target(seq, output_hidden_states=True)
        aux = torch.cat([full.hidden_states[i + 1].float() for i in LAYER_IDS], dim=-1)
        greedy = full.logits.float().argmax(-1)
    return seq, aux, greedy, ids.shape[1]


class Head:
    """EAGLE-3's draft layer as llama_eagle3.py computes it, in float32 for training."""

    def __init__(self, cfg, draft_vocab: int, lm_rows, seed: int):
        import torch

        gen = torch.Generator().manual_seed(seed)
        hid, inter = cfg.hidden_size, cfg.intermediate_size
        self.heads = cfg.num_attention_heads
        self.head_dim = hid // self.heads
        self.eps = cfg.rms_norm_eps
        theta = getattr(cfg, "rope_theta", None) or (getattr(cfg, "rope_parameters", None) or {}).get(
            "rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))

        def lin(n_out, n_in):
            return (torch.randn(n_out, n_in, generator=gen) * (1.0 / math.sqrt(n_in))).requires_grad_()

        qkv_out = self.heads * self.head_dim
        self.p = {
            "fc.weight": lin(hid, hid * len(LAYER_IDS)),
            "midlayer.hidden_norm.weight": torch.ones(hid, requires_grad=True),
            "midlayer.input_layernorm.weight": torch.ones(hid, requires_grad=True),
            "midlayer.post_attention_layernorm.weight": torch.ones(hid, requires_grad=True),
            "midlayer.self_attn.q_proj.weight": lin(qkv_out, 2 * hid),
            "midlayer.self_attn.k_proj.weight": lin(qkv_out, 2 * hid),
            "midlayer.self_attn.v_proj.weight": lin(qkv_out, 2 * hid),
            "midlayer.self_attn.o_proj.weight": lin(hid, qkv_out),
            "midlayer.mlp.gate_proj.weight": lin(inter, hid),
            "midlayer.mlp.up_proj.weight": lin(inter, hid),
            "midlayer.mlp.down_proj.weight": lin(hid, inter),
            "norm.weight": torch.ones(hid, requires_grad=True),
            "lm_head.weight": lm_rows.clone().float().requires_grad_(),
        }
        assert self.p["lm_head.weight"].shape[0] == draft_vocab

    def rms(self, x, name):
        import torch

        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.p[name]

    def rope(self, x, pos):
        import torch

        freqs = pos[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    def qkv(self, hidden, emb, pos):
        """The input layer: residual, then q, k, v (batch, heads, time, dim) at positions pos."""
        import torch

        bsz, time_len, _ = hidden.shape
        x = torch.cat([self.rms(emb, "midlayer.input_layernorm.weight"),
                       self.rms(hidden, "midlayer.hidden_norm.weight")], dim=-1)

        def proj(name):
            return (x @ self.p[f"midlayer.self_attn.{name}.weight"].T).view(
                bsz, time_len, self.heads, self.head_dim).transpose(1, 2)

        return hidden, self.rope(proj("q_proj"), pos), self.rope(proj("k_proj"), pos), proj("v_proj")

    def finish(self, attn, residual):
        """o_proj, the fused adds and norms, the MLP: (logits hidden, pre-norm output fed back)."""
        import torch

        bsz, _, time_len, _ = attn.shape
        attn = attn.transpose(1, 2).reshape(bsz, time_len, -1) @ self.p["midlayer.self_attn.o_proj.weight"].T
        residual = attn + residual
        hid = self.rms(residual, "midlayer.post_attention_layernorm.weight")
        mlp = (torch.nn.functional.silu(hid @ self.p["midlayer.mlp.gate_proj.weight"].T)
               * (hid @ self.p["midlayer.mlp.up_proj.weight"].T)) @ self.p["midlayer.mlp.down_proj.weight"].T
        residual = mlp + residual
        return self.rms(residual, "norm.weight"), residual

    def unroll(self, aux, tokens, embed):
        """Draft logits for steps 1..DRAFT_STEPS at every base position t (step s predicts the
        target's token at t + s + 1 from the target's features at t and the tokens up to t + s)."""
        import torch

        bsz, time_len, _ = aux.shape
        scale = 1.0 / math.sqrt(self.head_dim)
        pos = torch.arange(time_len)
        steps = []
        hidden = aux @ self.p["fc.weight"].T
        keys, values = None, None
        diag_k, diag_v = [], []
        for step in range(1, DRAFT_STEPS + 1):
            # step s at base t reads token t + s (shifted in; the tail is padding, masked by the loss)
            tok = torch.nn.functional.pad(tokens[:, step:], (0, step), value=0)
            residual, q, k, v = self.qkv(hidden, embed(tok), pos + step - 1)
            if step == 1:
                keys, values = k, v
                causal = torch.ones(time_len, time_len, dtype=torch.bool).tril()
                scores = (q @ keys.transpose(-1, -2)) * scale
                scores = scores.masked_fill(~causal, float("-inf"))
                weights = torch.softmax(scores, dim=-1)
                attn = weights @ values
            else:
                diag_k.append(k)
                diag_v.append(v)
                causal = torch.ones(time_len, time_len, dtype=torch.bool).tril()
                main = ((q @ keys.transpose(-1, -2)) * scale).masked_fill(~causal, float("-inf"))
                own = [((q * dk).sum(-1, keepdim=True)) * scale for dk in diag_k]
                weights = torch.softmax(torch.cat([main] + own, dim=-1), dim=-1)
                attn = weights[..., :time_len] @ values
                for j, dv in enumerate(diag_v):
                    attn = attn + weights[..., time_len + j:time_len + j + 1] * dv
            logits_h, hidden = self.finish(attn, residual)
            steps.append(logits_h @ self.p["lm_head.weight"].T)
        return steps


def chain_targets(tokens, greedy, prompt_len, draft_of):
    """Per step s: the label (draft id, -1 where not draftable) and where the loss counts."""
    import torch

    bsz, time_len = tokens.shape
    labels, masks = [], []
    # agrees[t] = the sequence's token at t + 1 is the target's greedy token at t
    agrees = torch.zeros_like(tokens, dtype=torch.bool)
    agrees[:, :-1] = tokens[:, 1:] == greedy[:, :-1]
    for step in range(1, DRAFT_STEPS + 1):
        lab = torch.full_like(tokens, -1)
        ok = torch.zeros_like(tokens, dtype=torch.bool)
        span = time_len - step - 1
        if span > 0:
            lab[:, :span] = draft_of[greedy[:, step:step + span]]
            ok[:, :span] = lab[:, :span] >= 0
            # step 1 counts from the prompt's last token; later steps only along the target's own chain
            ok[:, :span] &= torch.arange(span)[None, :] >= prompt_len - 1
            for j in range(1, step):
                ok[:, :span] &= agrees[:, j:j + span]
        labels.append(lab)
        masks.append(ok)
    return labels, masks


def accept_length(head, data, embed, draft_of, prompt_len):
    """Mean accepted tokens per verify (bonus counted) of a greedy chain of DRAFT_STEPS, and the
    first step's agreement, over the continuation positions."""
    import torch

    total, count, first_hits, first_n = 0.0, 0, 0, 0
    with torch.no_grad():
        for tokens, aux, greedy in data:
            steps = head.unroll(aux, tokens, embed)
            labels, masks = chain_targets(tokens, greedy, prompt_len, draft_of)
            base = torch.zeros_like(tokens, dtype=torch.bool)
            base[:, prompt_len - 1:tokens.shape[1] - DRAFT_STEPS - 1] = True
            run = torch.ones_like(tokens, dtype=torch.bool)
            accepted = torch.zeros_like(tokens, dtype=torch.float)
            for step, (logits, lab) in enumerate(zip(steps, labels, strict=True)):
                hit = (logits.argmax(-1) == lab) & (lab >= 0)
                if step == 0:
                    first_hits += int((hit & base).sum())
                    first_n += int(base.sum())
                # a chain step counts only if every earlier step was right (tokens then are the target's)
                run = run & hit
                accepted += run.float()
            total += float((accepted + 1.0)[base].sum())
            count += int(base.sum())
    return total / max(count, 1), first_hits / max(first_n, 1), first_n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models")
    parser.add_argument("--out", default=None)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--seqs", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--draft-vocab", type=int, default=1024)
    parser.add_argument("--held-out", type=int, default=0, help="evaluate on the first N built-in prompts (0: all)")
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args(argv)
    out = args.out or os.path.join(args.models, "tiny-eagle3")
    if os.path.isfile(os.path.join(out, "config.json")) and os.path.isfile(os.path.join(out, "model.safetensors")):
        print(f"make_eagle3_head: kept {out}")
        return 0

    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.time()
    target_dir = os.path.join(args.models, "tiny")
    tok = AutoTokenizer.from_pretrained(target_dir)
    # bf16 weights (as stored and served) computed in float32: PyTorch's bf16 matmuls on a CPU
    # without AMX are many times slower, and SGLang's CPU kernels accumulate in float32 too.
    target = LlamaForCausalLM.from_pretrained(target_dir, torch_dtype=torch.bfloat16).float().eval()
    cfg = target.config
    if cfg.num_hidden_layers <= max(LAYER_IDS) + 1:
        raise SystemExit(f"the target has {cfg.num_hidden_layers} layers: the head reads layers {LAYER_IDS}")
    embed_w = target.get_input_embeddings().weight.detach().float()
    lm_w = target.get_output_embeddings().weight.detach().float()

    def embed(ids):
        return embed_w[ids]

    # training data: corpus windows; evaluation: the benchmark's own prompts (held out)
    train_bodies = corpus_windows(tok, args.seqs, args.seed)
    held = []
    for text in builtin_prompts()[:args.held_out or None]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if len(ids) >= PROMPT_TOKENS:
            held.append(ids[:PROMPT_TOKENS])
        else:  # pad short prompts with their own words, so every prompt has one length
            held.append((ids * (PROMPT_TOKENS // max(len(ids), 1) + 1))[:PROMPT_TOKENS])
    train, evaluation, prompt_len = [], [], 0
    for bodies, into in ((train_bodies, train), (held, evaluation)):
        for i in range(0, len(bodies), 32):
            seq, aux, greedy, prompt_len = target_pass(target, [chat_ids(tok, b) for b in bodies[i:i + 32]])
            into.append((seq, aux, greedy))
            print(f"make_eagle3_head: target pass {len(train) + len(evaluation)} ({time.time() - t0:.0f} s)",
                  file=sys.stderr)
    t_data = time.time() - t0

    # the draft vocabulary: the target's most frequent greedy tokens on the training data
    counts = torch.zeros(cfg.vocab_size, dtype=torch.long)
    for _seq, _aux, greedy in train:
        counts += torch.bincount(greedy[:, prompt_len - 1:].reshape(-1), minlength=cfg.vocab_size)
    draft_vocab = min(args.draft_vocab, cfg.vocab_size)
    hot = counts.argsort(descending=True)[:draft_vocab].sort().values
    coverage = float(counts[hot].sum()) / max(float(counts.sum()), 1.0)
    draft_of = torch.full((cfg.vocab_size,), -1, dtype=torch.long)
    draft_of[hot] = torch.arange(draft_vocab)

    head = Head(cfg, draft_vocab, lm_w[hot], args.seed)
    params = list(head.p.values())
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=args.steps, pct_start=0.1)
    rng = random.Random(args.seed)
    weights = [0.8 ** s for s in range(DRAFT_STEPS)]
    for it in range(args.steps):
        seq, aux, greedy = rng.choice(train)
        pick = torch.randperm(seq.shape[0])[:args.batch]
        # a window of CROP positions ending inside the continuation: the cost is per position, and
        # attention over a shorter past is what the first tokens of every continuation see anyway
        start = rng.randrange(0, max(1, seq.shape[1] - CROP + 1))
        window = slice(start, start + CROP)
        tokens, feats, greedy = seq[pick, window], aux[pick, window], greedy[pick, window]
        steps = head.unroll(feats, tokens, embed)
        labels, masks = chain_targets(tokens, greedy, max(prompt_len - start, 1), draft_of)
        loss = 0.0
        for wgt, logits, lab, ok in zip(weights, steps, labels, masks, strict=True):
            if ok.any():
                loss = loss + wgt * torch.nn.functional.cross_entropy(logits[ok], lab[ok])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if it % 200 == 0 or it == args.steps - 1:
            print(f"make_eagle3_head: step {it} loss {float(loss.detach()):.3f} ({time.time() - t0:.0f} s)", file=sys.stderr)

    accept, first, positions = accept_length(head, evaluation, embed, draft_of, prompt_len)
    accept_train, first_train, _ = accept_length(head, train[:4], embed, draft_of, prompt_len)

    tmp = out + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    tensors = {name: p.detach().to(torch.bfloat16).contiguous() for name, p in head.p.items()}
    tensors["d2t"] = (hot - torch.arange(draft_vocab)).contiguous()
    t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
    t2d[hot] = True
    tensors["t2d"] = t2d
    save_file(tensors, os.path.join(tmp, "model.safetensors"))
    conf = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "torch_dtype": "bfloat16",
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size, "num_hidden_layers": 1,
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_attention_heads,
        "head_dim": cfg.hidden_size // cfg.num_attention_heads, "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": getattr(cfg, "rope_theta", None) or 10000.0,
        "max_position_embeddings": cfg.max_position_embeddings, "vocab_size": cfg.vocab_size,
        "draft_vocab_size": draft_vocab, "tie_word_embeddings": False, "target_hidden_size": cfg.hidden_size,
        "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "pad_token_id": cfg.pad_token_id,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": LAYER_IDS, "use_aux_hidden_state": True},
        "specbench_training": {
            "target": "tiny", "train_sequences": args.seqs, "steps": args.steps, "draft_steps": DRAFT_STEPS,
            "draft_vocab_coverage": round(coverage, 4), "held_out_first_step_agreement": round(first, 4),
            "held_out_accept_length_k3": round(accept, 3), "train_accept_length_k3": round(accept_train, 3),
        },
    }
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(conf, handle, indent=1)
    if os.path.exists(out):
        raise SystemExit(f"{out} exists without a complete head: remove it and run again")
    os.replace(tmp, out)
    print(f"make_eagle3_head: {out}: held out ({len(held)} built-in prompts, {positions} positions): first-step "
          f"agreement {first:.3f}, accept length {accept:.2f} at {DRAFT_STEPS} steps (train {accept_train:.2f}); "
          f"draft vocabulary {draft_vocab} covering {coverage:.3f} of the target's greedy tokens; data "
          f"{t_data:.0f} s, all {time.time() - t0:.0f} s (computed on CPU, no server)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

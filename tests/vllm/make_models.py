"""Build the tiny models the vLLM tests serve: no hub access, a few seconds, ~11 MB each.

Run with the vLLM venv's Python (it has transformers and tokenizers):

    .venv-vllm/bin/python tests/vllm/make_models.py DIR

DIR/tiny        a 4-layer Llama with random weights (fixed seed), a byte-level BPE tokenizer
                trained on /usr/share/common-licenses and a chat template
DIR/tiny-draft  the same model with noise on its weights (a draft model that is partly right)
DIR/other-vocab a model whose tokenizer and vocabulary differ (the bad-input case)

Idempotent: a model folder with its config.json and weights is kept.
"""
from __future__ import annotations

import glob
import os
import sys

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus() -> list[str]:
    files = sorted(glob.glob("/usr/share/common-licenses/*"))
    texts = []
    for path in files:
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                texts.append(handle.read())
    if not texts:
        texts = ["the quick brown fox jumps over the lazy dog " * 200]
    return texts


def tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model(tok, seed: int, noise: float = 0.0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=False)
    net = LlamaForCausalLM(cfg)
    if noise:
        gen = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for param in net.parameters():
                param.add_(torch.randn(param.shape, generator=gen) * noise * param.std().clamp(min=1e-3))
    return net.to(torch.bfloat16)


def done(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "config.json")) and bool(
        glob.glob(os.path.join(folder, "*.safetensors")))


def save(folder: str, tok, net) -> None:
    tmp = folder + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    tok.save_pretrained(tmp)
    net.save_pretrained(tmp)
    os.replace(tmp, folder) if not os.path.exists(folder) else None


def main(root: str) -> None:
    os.makedirs(root, exist_ok=True)
    target, draft, other = (os.path.join(root, n) for n in ("tiny", "tiny-draft", "other-vocab"))
    if not (done(target) and done(draft)):
        tok = tokenizer(4096)
        if not done(target):
            save(target, tok, model(tok, seed=0))
        if not done(draft):
            # The target's weights plus noise: same vocabulary, partly the same predictions.
            net = model(tok, seed=0, noise=0.1)
            save(draft, tok, net)
    if not done(other):
        tok = tokenizer(3000)
        save(other, tok, model(tok, seed=7))
    print(root)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".tmp", "vllm-models"))

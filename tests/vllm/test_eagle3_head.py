"""The EAGLE-3 head the real-SGLang check serves (tests/sglang_cpu/make_eagle3_head.py), trained briefly
on the tiny target with the vLLM venv's torch and transformers: the checkpoint SGLang 0.5.18's
``LlamaForCausalLMEagle3`` reads (sglang/srt/models/llama_eagle3.py: ``midlayer`` read as ``layers.0``,
q/k/v/gate/up stacked, ``d2t`` as the draft-to-target offsets, ``t2d`` skipped), its shapes from the
target's config, and a training that learns (the loss falls). About a minute on 2 cores."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import vllmkit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "sglang_cpu" / "make_eagle3_head.py"


def test_the_head_is_the_checkpoint_sglang_loads_and_it_learns(models, tmp_path):
    out = tmp_path / "head"
    cmd = [str(vllmkit.VENV_PYTHON), str(SCRIPT), str(models), "--out", str(out), "--steps", "40", "--seqs", "32",
           "--draft-vocab", "512", "--held-out", "16"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [float(x) for x in re.findall(r"step \d+ loss ([\d.]+)", done.stderr)]
    assert len(losses) >= 2 and losses[-1] < 0.5 * losses[0], losses
    line = done.stdout.strip().splitlines()[-1]
    assert "first-step agreement" in line and "(computed on CPU, no server)" in line, line
    target = json.loads((models / "tiny" / "config.json").read_text())
    conf = json.loads((out / "config.json").read_text())
    hid, inter = target["hidden_size"], target["intermediate_size"]
    assert conf["architectures"] == ["LlamaForCausalLMEagle3"] and conf["num_hidden_layers"] == 1
    assert conf["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert conf["draft_vocab_size"] == 512 and conf["vocab_size"] == target["vocab_size"]
    assert (conf["hidden_size"], conf["intermediate_size"]) == (hid, inter) and not conf["tie_word_embeddings"]

    # read with the vLLM venv's safetensors and torch
    probe = ("import json, sys, torch; from safetensors.torch import load_file; w = load_file(sys.argv[1]); "
             "hot = w['d2t'] + torch.arange(w['d2t'].shape[0]); "
             "print(json.dumps({'shapes': {k: list(v.shape) for k, v in w.items()}, 'hot': hot.tolist(), "
             "'t2d': int(w['t2d'].sum()), 't2d_hot': bool(w['t2d'][hot].all())}))")
    read = subprocess.run([str(vllmkit.VENV_PYTHON), "-c", probe, str(out / "model.safetensors")], capture_output=True,
                          text=True, timeout=300, check=True)
    got = json.loads(read.stdout)
    shapes = {name: tuple(shape) for name, shape in got["shapes"].items()}
    heads = target["num_attention_heads"]
    assert shapes == {
        "fc.weight": (hid, 3 * hid),
        "midlayer.hidden_norm.weight": (hid,), "midlayer.input_layernorm.weight": (hid,),
        "midlayer.post_attention_layernorm.weight": (hid,),
        "midlayer.self_attn.q_proj.weight": (hid // heads * heads, 2 * hid),
        "midlayer.self_attn.k_proj.weight": (hid // heads * heads, 2 * hid),
        "midlayer.self_attn.v_proj.weight": (hid // heads * heads, 2 * hid),
        "midlayer.self_attn.o_proj.weight": (hid, hid),
        "midlayer.mlp.gate_proj.weight": (inter, hid), "midlayer.mlp.up_proj.weight": (inter, hid),
        "midlayer.mlp.down_proj.weight": (hid, inter),
        "norm.weight": (hid,), "lm_head.weight": (512, hid), "d2t": (512,), "t2d": (target["vocab_size"],),
    }
    # SGLang: hot_token_id = d2t + arange, the target ids of the draft vocabulary (distinct, in the vocabulary)
    assert len(set(got["hot"])) == 512 and min(got["hot"]) >= 0 and max(got["hot"]) < target["vocab_size"]
    assert got["t2d"] == 512 and got["t2d_hot"]
    # run again: the head is kept, not trained again
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                           env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert again.returncode == 0 and "kept" in again.stdout

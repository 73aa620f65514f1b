"""The playbooks' extra vars for a real SGLang (0.5.18 to 0.5.23) on this machine's CPU, as JSON:
engine=sglang, SGLANG_USE_CPU_ENGINE=1, bf16, --device cpu, --attention-backend intel_amx (kept by
launch_cpu.py on a CPU without AMX), --disable-overlap-schedule, 0.3 of memory and 32768 tokens of
KV cache; no GPU: the sglang_server preflight reads none and the teardown an empty emulated device
folder (it still kills the recorded server tree). SGLang's caches stay out of ~/.cache/sglang:
its JIT builds in JIT (kept across runs by run_real_sglang.sh: NGRAM's corpus compiles in ~66 s),
the rest in WORK. run_real_sglang.sh runs with these; the test holds them against SGLang's own
parser in check mode. Models (MODELS): tiny (the target), tiny-draft (standalone's draft), tiny-eagle3
(the EAGLE-3 head make_eagle3_head.py trains on the target).

    python3 cpu_vars.py MODE WORK MODELS PORT PYTHON [JIT]
"""
from __future__ import annotations

import json
import sys


def cpu_vars(mode: str, work: str, models: str, port: int, python: str, jit: str | None = None) -> dict:
    node = f"{work}/node"
    # sglang/srt/environ.py: SGLANG_CACHE_DIR (~/.cache/sglang), SGLANG_JIT_CACHE_DIR (its jit/);
    # torch's inductor and triton caches beside them.
    caches = {"SGLANG_CACHE_DIR": f"{work}/sglang-cache", "SGLANG_JIT_CACHE_DIR": jit or f"{work}/sglang-cache/jit",
              "TORCHINDUCTOR_CACHE_DIR": f"{work}/inductor-cache", "TRITON_CACHE_DIR": f"{work}/triton-cache"}
    return {
        "mode": mode, "engine": "sglang", "run_id": "cpu-check", "results_dir": f"{work}/results",
        "specbench_node_dir": node, "specbench_emulator_device_dir": f"{node}/emulated-dev",
        "gpu_backend": "emulated", "gpu_device_glob": f"{node}/emulated-dev/nvidia*",
        "sglang_server_gpu_backend": "none",
        "bench_api": "chat", "bench_concurrency": [1, 4], "bench_warmup_s": 3, "bench_window_s": 10,
        "bench_input_len": 64, "bench_output_len": 64, "bench_request_timeout_s": 300,
        "sglang_python": python, "sglang_model_path": f"{models}/tiny",
        "sglang_server_standalone_draft_model_path": f"{models}/tiny-draft",
        "sglang_draft_model_path": f"{models}/tiny-eagle3", "sglang_server_port": port,
        # EAGLE-3 drafts a chain (top-k 1), as STANDALONE's automatic settings (3, 1, 4) do: SGLang's
        # automatic choice for a Llama target is a tree (5, 4, 8; arg_groups/speculative_hook.py,
        # _auto_choose_speculative_params), and 0.5.18's CPU attention sizes its decode buffer by
        # the batch, not the tree (intel_amx_backend.py forward_decode: "CHECK_EQ(attn_logits.size(0),
        # num_seqs) failed. 4 vs 1" in the first draft step). Top-k 1 also lets eagle3-adaptive run.
        "sglang_server_speculative_num_steps": 3, "sglang_server_speculative_eagle_topk": 1,
        "sglang_server_speculative_num_draft_tokens": 4,
        "sglang_server_tp_size": 1, "sglang_server_context_length": 1024, "sglang_server_mem_fraction_static": 0.3,
        "sglang_server_max_running_requests": 16, "sglang_server_cuda_graph_max_bs": 16,
        "sglang_server_chunked_prefill_size": 1024, "sglang_server_ready_timeout": 600,
        "sglang_server_environment": {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", **caches},
        "sglang_server_extra_args": ["--device", "cpu", "--dtype", "bfloat16", "--attention-backend", "intel_amx",
                                     "--disable-overlap-schedule", "--max-total-tokens", "32768"],
    }


if __name__ == "__main__":
    mode, work, models, port, python = sys.argv[1:6]
    print(json.dumps(cpu_vars(mode, work, models, int(port), python, sys.argv[6] if len(sys.argv) > 6 else None)))

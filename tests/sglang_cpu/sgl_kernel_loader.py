"""The package ``sgl_kernel`` of run_real_sglang.sh's kernel cache: SGLang 0.5.23 imports
``sgl_kernel`` and calls ``torch.ops.sgl_kernel.*`` (sglang/srt/utils/common.py,
_is_intel_amx_backend_available; sglang/srt/layers/attention/intel_amx_backend.py). This file,
copied beside the library built from SGLang's CPU kernel source, loads it into torch.ops."""
from __future__ import annotations

import glob
import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBS = sorted(glob.glob(os.path.join(_HERE, "*.so")))
if not _LIBS:
    raise ImportError(f"sgl_kernel: no built library in {_HERE} (run tests/sglang_cpu/run_real_sglang.sh)")
for _lib in _LIBS:
    torch.ops.load_library(_lib)

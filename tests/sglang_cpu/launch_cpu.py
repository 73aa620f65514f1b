"""SGLang's launcher for a CPU without AMX: ``python launch_cpu.py ARGS`` runs
``python -m sglang.launch_server ARGS`` with one fallback of its argument resolution left out.

On a CPU whose torch reports no AMX tiles (or before the CPU kernel loads), SGLang (0.5.18 to 0.5.23) swaps
``--attention-backend intel_amx`` for ``torch_native`` with a log warning
(sglang/srt/arg_groups/overrides.py, _attention_backend_platform_fallbacks, a registered
post-process pass), and torch_native crashes on every speculative verify. The kernel's attention
needs AVX-512 only (issue 40: built and served on a 2-core AVX-512 machine without AMX), so the
pass is wrapped to keep intel_amx on the CPU device; every other case (the XPU fallback) is
passed through. run_real_sglang.sh puts this in front of the role's ``-m sglang.launch_server``.
"""
from __future__ import annotations

import runpy
import sys


def keep_intel_amx() -> bool:
    """Wrap SGLang's platform fallback pass in place; True when it was found."""
    from sglang.srt.arg_groups import overrides

    original = getattr(overrides, "_attention_backend_platform_fallbacks", None)
    if original is None:
        return False

    def wrapped(view, _orig=original):
        if view.attention_backend == "intel_amx" and view.device == "cpu":
            return {}
        return _orig(view)

    wrapped.__name__ = original.__name__
    # 0.5.23 runs the registered passes from the list; 0.5.18 calls this one from its legacy slot in
    # sglang/srt/server_args.py (run_post_process_pass(self, _attention_backend_platform_fallbacks),
    # imported from the module when it runs): both are replaced.
    overrides._attention_backend_platform_fallbacks = wrapped
    passes = overrides.POST_PROCESS_PASSES
    for i, fn in enumerate(passes):
        if fn is original:
            passes[i] = wrapped
    return True


def main() -> None:
    if not keep_intel_amx():
        print("launch_cpu: SGLang's _attention_backend_platform_fallbacks pass was not found: this launcher "
              "matches SGLang 0.5.18 to 0.5.23 (sglang/srt/arg_groups/overrides.py)", file=sys.stderr)
        sys.exit(2)
    sys.argv = ["sglang.launch_server", *sys.argv[1:]]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

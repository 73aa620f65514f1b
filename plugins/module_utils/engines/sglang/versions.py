# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The SGLang releases specbench supports, each with what it has and lacks; standard library only.

Every fact below was read from the release's own wheel on PyPI (paths inside the ``sglang``
package; ``pip download --no-deps sglang==V`` gives them again):

* ``openai_spec_details``: the chat and completions APIs take ``return_spec_tokens_details`` and
  answer ``sglext.spec_tokens_details`` per request (srt/entrypoints/openai/protocol.py). Absent in
  0.5.18, which ignores the field: the accept length then comes from ``/metrics`` or ``/server_info``.
* ``server_info``: ``GET /server_info`` (srt/entrypoints/http_server.py); every supported release
  also answers the deprecated ``/get_server_info``.
* ``cuda_graph_max_bs``: the single ``--cuda-graph-max-bs`` flag still declared (srt/server_args.py,
  beside ``--cuda-graph-max-bs-decode`` and ``-prefill``, which every supported release has); 0.5.20
  removed it, and argparse then finds the old spelling ambiguous.
* ``torch``: the torch the release pins (its METADATA ``Requires-Dist: torch==``).
* ``cpu_kernel_attention_args``: how many arguments the release passes to its CPU kernel's
  ``extend_attention_cpu`` (srt/layers/attention/intel_amx_backend.py); the opt-in real-SGLang
  check matches a source tree's kernel to a release by it.

Flags are still checked against the node's own parser at launch: this table decides which
releases the node preflight accepts at all. The client needs no row of it: where a release answers
no ``sglext.spec_tokens_details`` it takes the accept length from ``/metrics`` by itself and says so
in ``accept_length_source``; the opt-in real-SGLang check reads ``openai_spec_details`` to know
which of the two to require.
"""
from __future__ import annotations

RELEASES: dict[str, dict] = {
    "0.5.18": {"openai_spec_details": False, "server_info": True, "cuda_graph_max_bs": True,
               "torch": "2.13.0", "cpu_kernel_attention_args": 19},
    "0.5.19": {"openai_spec_details": True, "server_info": True, "cuda_graph_max_bs": True,
               "torch": "2.13.0", "cpu_kernel_attention_args": 20},
    "0.5.20": {"openai_spec_details": True, "server_info": True, "cuda_graph_max_bs": False,
               "torch": "2.13.0", "cpu_kernel_attention_args": 22},
    "0.5.21": {"openai_spec_details": True, "server_info": True, "cuda_graph_max_bs": False,
               "torch": "2.13.0", "cpu_kernel_attention_args": 22},
    "0.5.22": {"openai_spec_details": True, "server_info": True, "cuda_graph_max_bs": False,
               "torch": "2.14.1", "cpu_kernel_attention_args": 22},
    "0.5.23": {"openai_spec_details": True, "server_info": True, "cuda_graph_max_bs": False,
               "torch": "2.14.1", "cpu_kernel_attention_args": 22},
}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


OLDEST = min(RELEASES, key=_key)
NEWEST = max(RELEASES, key=_key)
RANGE = f"{OLDEST} to {NEWEST}"


def public_version(version: str) -> str:
    """The PEP 440 public part: 0.5.23+specbench-emulator -> 0.5.23."""
    return str(version).split("+", 1)[0].strip()


def release(version: str | None) -> dict | None:
    """The table's row for ``version`` (compared on the public version), or None when unsupported."""
    if not version:
        return None
    return RELEASES.get(public_version(version))


def supports(version: str | None, feature: str) -> bool | None:
    """Whether ``version`` has ``feature``; None when the version is unknown or unsupported."""
    row = release(version)
    return None if row is None else bool(row.get(feature))


def unsupported(version: str) -> str | None:
    """None for a supported release, else the sentence that refuses it by name with the range."""
    if release(version) is not None:
        return None
    return (f"SGLang {version} is not a release specbench supports (supported: {RANGE}; "
            f"{', '.join(sorted(RELEASES, key=_key))})")


def by_kernel_args(count: int) -> list[str]:
    """The releases whose CPU attention call passes ``count`` arguments, oldest first."""
    return sorted((v for v, row in RELEASES.items() if row["cpu_kernel_attention_args"] == count), key=_key)

"""A faithful, standard-library-only emulator of an SGLang server on emulated GPUs.

It takes ``python -m sglang.launch_server``'s flags, serves SGLang's HTTP API with SGLang's
response shapes, schedules requests with continuous batching under a documented
performance model (model.py) and holds emulated GPU device files in worker processes that
look like SGLang's schedulers (gpus.py). It takes SGLang ``SGLANG_VERSION``'s flags and
reports ``REPORTED_VERSION`` (that version with a PEP 440 local label), so no result can be
mistaken for a real SGLang's; ``/server_info``'s ``emulator`` key says more.
"""

SGLANG_VERSION = "0.5.23"
REPORTED_VERSION = "0.5.23+specbench-emulator"

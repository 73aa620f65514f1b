"""A faithful, standard-library-only emulator of an SGLang server on emulated GPUs.

It takes ``python -m sglang.launch_server``'s flags, serves SGLang's HTTP API with SGLang's
response shapes, schedules requests with continuous batching under a documented
performance model (model.py) and holds emulated GPU device files in worker processes that
look like SGLang's schedulers (gpus.py). The version it reports is SGLang's, so tools can
tell what they talk to only from ``/get_server_info``'s ``emulator`` key.
"""

SGLANG_VERSION = "0.5.23"

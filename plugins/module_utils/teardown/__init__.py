# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The teardown: everything that makes the target GPUs clean and proves it.

- ``sequence``: the teardown itself, step by step (``Teardown``, which the module gpu_teardown runs);
- ``settings``: its inputs checked, the engines' kill patterns, what is never signalled;
- ``record``: the launch records (state/servers/<port>.json, one per launch) read, verified and retired;
- ``holders``: who holds a target GPU's device nodes or memory, and who may be signalled;
- ``signals``: TERM then KILL, each target verified before any signal;
- ``clean``: the wait until every target GPU reads idle, with its settle window;
- ``words``: every message the teardown prints;
- ``gpu_state``: the GPU reader (NVML, nvidia-smi, the emulated device folder);
- ``proc_table``: the process reader (/proc: command lines, start times, open device nodes).

Imports: the standard library (and nvidia-ml-py where present) and this package only: a bottom
layer, which the launch uses for its readers (see docs/ARCHITECTURE.md).
"""

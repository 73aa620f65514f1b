"""Run the SGLang emulator: ``python3 files/sglang_emulator --model-path ... [flags]``.

Also ``python3 -m sglang_emulator`` with the folder above it on PYTHONPATH.
"""

import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sglang_emulator.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""``python3 -m specbench_client`` (with this folder's parent on the path): the command line."""
from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())

"""A bytecode cache for the Python that modules run from zip archives: test-suite CPU only.

Every Ansible module runs as a zip (AnsiballZ: the module and its module_utils, ansible-core's
included) that ``zipimport`` imports; a zip holds sources only, and zipimport compiles each one,
every run (``zipimport._compile_source``, CPython 3.11's Lib/zipimport.py; it reads a ``.pyc``
only from inside the archive). The suite runs about 900 modules: compiling ansible-core's
module_utils took 0.12 CPU-s of a stat module's 0.33 here, roughly 110 CPU-s a suite on 2 cores.

tests/run installs this file into .venv's site-packages with a ``.pth`` that imports it, and sets
SPECBENCH_ZIPIMPORT_CACHE to a folder. Without that variable the import does nothing (a user's
playbooks through .venv are untouched). With it, a source compiled from a zip is kept in the
folder under the SHA-256 of the interpreter's magic number, its optimisation level and the source
bytes, and a later compile of the same bytes loads it instead: the same code object ``compile``
returns, its file names set to this archive's path (a traceback names the zip this run imported,
as without the cache). Anything that fails (an unreadable folder, a damaged entry) compiles as
zipimport does. Module runs on a real node (other interpreters, ssh) never see it.
"""
from __future__ import annotations

import os

FOLDER = os.environ.get("SPECBENCH_ZIPIMPORT_CACHE")


def _install(folder: str) -> None:
    import hashlib
    import importlib.util
    import marshal
    import sys
    import zipimport

    compile_source = zipimport._compile_source  # noqa: SLF001 - the one place zipimport compiles
    code_type = type(_install.__code__)

    def named(code, filename: str):
        consts = tuple(named(c, filename) if isinstance(c, code_type) else c for c in code.co_consts)
        return code.replace(co_filename=filename, co_consts=consts)

    def cached_compile(pathname: str, source: bytes):
        key = hashlib.sha256(importlib.util.MAGIC_NUMBER + bytes([sys.flags.optimize]) + source).hexdigest()
        path = os.path.join(folder, key[:2], key)
        try:
            with open(path, "rb") as entry:
                return named(marshal.loads(entry.read()), pathname)
        except (OSError, ValueError, EOFError, TypeError):
            pass
        code = compile_source(pathname, source)
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            part = f"{path}.{os.getpid()}"
            with open(part, "wb") as entry:
                entry.write(marshal.dumps(code))
            os.replace(part, path)  # whole or absent: a reader never sees a half-written entry
        except OSError:
            pass
        return code

    zipimport._compile_source = cached_compile  # noqa: SLF001


if FOLDER:
    _install(FOLDER)

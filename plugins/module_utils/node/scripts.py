# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The files bench_scripts ships: the controller's manifest and the node's check against it.

Standard library only. One sha256 implementation for both sides: the manifest is computed on
the controller (module bench_scripts_manifest, delegated to localhost; its action plugin runs
``manifest_result`` in the controller's worker, without a Python child) and every node file is
compared with it (module bench_scripts_verify) on every run.

An entry with ``build: zipapp`` ships a Python package folder as one runnable file, built on
the controller at ship time (``zipapp_bytes``): byte for byte the same from the same sources,
so its sha256 is stable and a second run changes nothing.
"""
from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
import zipfile

SKIP_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".git"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".swp", "~")
TMP_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")
BUILDS = ("zipapp",)
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # every member's timestamp: the build depends on contents only
# The zipapp's entry point runs the package's command line, ``<package>.cli.main()``. The package
# itself has no ``__main__.py``: galaxy-importer refuses a module_utils name with ``__``.
ZIPAPP_MAIN = (
    "# Entry point of a zipapp built by specbench's bench_scripts: run the package's command line.\n"
    "import sys\n\nfrom {name}.cli import main\n\nsys.exit(main())\n"
)


# The options of module bench_scripts_manifest (the module and its action plugin both validate them).
MANIFEST_ARGUMENT_SPEC = {
    "root": {"type": "path", "required": True},
    "files": {"type": "list", "elements": "dict", "required": True},
}


class ScriptsError(Exception):
    """A file list the role refuses; the text names the entry and the fix."""


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_files(folder: str) -> list[tuple[str, str]]:
    """(path, name relative to ``folder``) of every file under ``folder`` (walked in sorted
    order, leaving out caches and compiled files)."""
    pairs = []
    for current, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            if not name.endswith(SKIP_SUFFIXES):
                full = os.path.join(current, name)
                pairs.append((full, os.path.relpath(full, folder).replace(os.sep, "/")))
    return pairs


def zipapp_bytes(package_dir: str) -> bytes:
    """The Python package folder ``package_dir`` as a zipapp (``python3 FILE.pyz ...`` runs its
    ``cli.main()``): a shebang, then a zip of the package under its own name and a ``__main__.py``
    that runs it. Deterministic: sorted members, fixed timestamps and modes, stored uncompressed
    (no dependence on the zlib version)."""
    package_dir = os.path.abspath(package_dir)
    name = os.path.basename(package_dir.rstrip(os.sep))
    if not os.path.isfile(os.path.join(package_dir, "__init__.py")):
        raise ScriptsError(f"{package_dir} is not a Python package (no __init__.py): a zipapp entry needs one.")
    if not os.path.isfile(os.path.join(package_dir, "cli.py")):
        raise ScriptsError(f"{package_dir} has no cli.py: a zipapp entry runs the package's cli.main().")
    members = [("__main__.py", ZIPAPP_MAIN.format(name=name).encode())]
    for full, rel in sorted(_package_files(package_dir), key=lambda pair: pair[1]):
        with open(full, "rb") as fh:
            members.append((f"{name}/{rel}", fh.read()))
    raw = io.BytesIO()
    raw.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED) as archive:
        for member, data in members:
            info = zipfile.ZipInfo(member, date_time=ZIP_EPOCH)
            info.create_system = 3  # unix, so the mode bits below are read
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return raw.getvalue()


def _built(entry: dict) -> bytes:
    """The bytes a ``build`` entry ships (today only zipapp)."""
    return zipapp_bytes(entry["src"])


def _relative(dest: str, index: int) -> str:
    norm = os.path.normpath(dest)
    if not dest or os.path.isabs(dest) or norm == ".." or norm.startswith("../"):
        raise ScriptsError(
            f"bench_scripts_files[{index}].dest {dest!r} must be a path relative to the node folder "
            "(bench_scripts_dir), without '..'."
        )
    return norm


def manifest(root: str, files: list[dict]) -> tuple[list[dict], list[str]]:
    """(entries, skipped): one entry per file (src, dest, sha256, mode); folders are walked.

    An entry marked ``optional`` whose source is absent is skipped and named in ``skipped``.
    """
    entries: list[dict] = []
    skipped: list[str] = []
    seen: dict[str, str] = {}
    for index, item in enumerate(files):
        if not isinstance(item, dict) or not item.get("src") or not item.get("dest"):
            raise ScriptsError(
                f"bench_scripts_files[{index}] must have src (relative to bench_scripts_source_root) and dest "
                f"(relative to bench_scripts_dir), got {item!r}."
            )
        src = os.path.join(root, os.path.expanduser(str(item["src"])))
        dest = _relative(str(item["dest"]), index)
        mode = str(item.get("mode") or "0644")
        build = item.get("build")
        if build is not None and build not in BUILDS:
            raise ScriptsError(f"bench_scripts_files[{index}].build is {build!r}: give one of {', '.join(BUILDS)} "
                               "(a package folder shipped as one runnable file), or leave it out to ship as is.")
        if not os.path.exists(src):
            if item.get("optional"):
                skipped.append(f"{item['src']} (optional, absent on the controller)")
                continue
            raise ScriptsError(
                f"bench_scripts_files[{index}].src {item['src']!r} does not exist on the controller (looked at "
                f"{src}): fix the path or bench_scripts_source_root."
            )
        if build:
            pairs = [(src, dest)]
        elif os.path.isdir(src):
            pairs = [(full, os.path.normpath(os.path.join(dest, rel))) for full, rel in _package_files(src)]
        else:
            pairs = [(src, dest)]
        for full, rel in pairs:
            if rel in seen:
                raise ScriptsError(f"two entries ship to {rel}: {seen[rel]} and {full}; give them different dests.")
            seen[rel] = full
            if build:
                entry = {"src": os.path.abspath(full), "dest": rel, "mode": mode, "build": build}
                entry["sha256"] = hashlib.sha256(_built(entry)).hexdigest()
            else:
                entry = {"src": os.path.abspath(full), "dest": rel, "sha256": sha256(full), "mode": mode}
            entries.append(entry)
    return entries, skipped


def manifest_result(params: dict) -> dict:
    """What module bench_scripts_manifest returns for its validated ``params`` (without changed
    and warnings): the manifest and the optional entries skipped. Raises ScriptsError, or OSError
    for a file it cannot read."""
    entries, skipped = manifest(params["root"], params["files"])
    return {"manifest": entries, "skipped": skipped}


def verify(folder: str, entries: list[dict]) -> dict:
    """Compare the node folder with the manifest: ok, missing and differs (lists of dest)."""
    result: dict = {"ok": [], "missing": [], "differs": []}
    for entry in entries:
        path = os.path.join(folder, entry["dest"])
        if not os.path.isfile(path):
            result["missing"].append(entry["dest"])
            continue
        try:
            same = sha256(path) == entry["sha256"]
        except OSError:
            same = False
        result["ok" if same else "differs"].append(entry["dest"])
    return result


def under_tmp(folder: str) -> bool:
    real = os.path.realpath(folder)
    return any(real == root or real.startswith(root + "/") for root in TMP_ROOTS)


def bundle(entries: list[dict], folder: str | None = None) -> str:
    """Write ``entries`` (from a manifest) to a tar file, members named by dest; its path (the
    action plugin bench_scripts_install ships it and removes it).

    One file moves over the connection instead of one transfer per file (pct_remote and SSH
    round trips dominate otherwise). A source whose sha256 changed since the manifest fails.
    """
    fd, path = tempfile.mkstemp(prefix="specbench-scripts-", suffix=".tar", dir=folder)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:
            for entry in entries:
                if entry.get("build"):
                    data = _built(entry)
                else:
                    with open(entry["src"], "rb") as fh:
                        data = fh.read()
                if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                    raise ScriptsError(f"{entry['src']} changed on the controller while shipping; run again.")
                info = tarfile.TarInfo(entry["dest"])
                info.size = len(data)
                info.mode = int(str(entry.get("mode") or "0644"), 8)
                tar.addfile(info, io.BytesIO(data))
    except BaseException:
        os.unlink(path)
        raise
    return path


def install(folder: str, bundle_path: str, entries: list[dict]) -> list[str]:
    """Place every entry from the tar ``bundle_path`` under ``folder``, each checked by sha256
    before it replaces the old file (written beside it, then renamed); returns the dests."""
    placed = []
    by_dest = {e["dest"]: e for e in entries}
    with tarfile.open(bundle_path, mode="r") as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        for dest, entry in by_dest.items():
            member = members.get(dest)
            if member is None:
                raise ScriptsError(f"the bundle lacks {dest}; run again.")
            data = tar.extractfile(member).read()
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise ScriptsError(f"{dest} arrived with another sha256 than the controller's copy; run again.")
            target = os.path.join(folder, dest)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            tmp = f"{target}.specbench-tmp"
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, int(str(entry.get("mode") or "0644"), 8))
            os.replace(tmp, target)
            placed.append(dest)
    return placed

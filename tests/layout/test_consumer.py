"""The collection as its users get it: the built tarball, installed read-only into a collections
path, run by FQCN from an empty folder by a user who is not root, with no inventory and no
ansible.cfg (issue 39's consumer path).

The run uses its own venv, made with /usr/bin/python3 (which every user may run) and only
ansible-core, the version the suite runs: the checkout's venv may sit under a folder only root can
read (a CI clone under /root). Everything the user touches lives in one folder under /tmp that the
test made; the only processes it may signal are the ones whose command line holds that folder.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from specbench_testkit import build_collection, free_port, kill_node_servers

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
USER = "nobody"


def _run(argv, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 300)
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **kwargs)


def _read_only(path: Path) -> None:
    for item in [path, *path.rglob("*")]:
        if not item.is_symlink():
            item.chmod(0o555 if item.is_dir() else (0o555 if item.stat().st_mode & stat.S_IXUSR else 0o444))


@pytest.fixture(scope="module")
def consumer():
    """(folder, venv bin, collections path, uid, gid): the tarball built and installed read-only."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("running as another user needs root and setpriv (util-linux)")
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        pytest.skip(f"no user {USER!r} on this machine (Debian's base-passwd has it)")
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("no /usr/bin/python3 for another user: apt-get install python3")
    folder = Path(tempfile.mkdtemp(prefix="specbench-consumer-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        tarball = build_collection(folder / "build")  # what it holds: tests/layout/test_collection.py
        # --offline: community.proxmox (the declared dependency) is already installed with the
        # suite's `ansible` package; no Galaxy server is contacted. --force: a specbench.core of the
        # same version anywhere on root's collections paths would otherwise make it "nothing to do".
        install = _run([BIN / "ansible-galaxy", "collection", "install", "--offline", "--force", tarball, "-p",
                        folder / "collections"], cwd=folder)
        assert install.returncode == 0, install.stdout + install.stderr
        assert (folder / "collections" / "ansible_collections" / "specbench" / "core" / "MANIFEST.json").is_file(), \
            install.stdout + install.stderr
        _read_only(folder / "collections")
        version = _run([BIN / "python", "-c", "import ansible.release as r; print(r.__version__)"]).stdout.strip()
        uv = os.environ.get("SPECBENCH_UV") or shutil.which("uv") or str(BIN / "uv")
        venv = folder / "venv"
        if Path(uv).is_file():
            made = _run([uv, "venv", "-q", "--python", "/usr/bin/python3", venv])
            made = made if made.returncode else _run([uv, "pip", "install", "-q", "--python", venv / "bin" / "python",
                                                      f"ansible-core=={version}"])
        else:
            made = _run(["/usr/bin/python3", "-m", "venv", venv])
            made = made if made.returncode else _run([venv / "bin" / "pip", "install", "-q", f"ansible-core=={version}"])
        assert made.returncode == 0, made.stdout + made.stderr
        for item in [venv, *venv.rglob("*")]:
            if not item.is_symlink():
                item.chmod(item.stat().st_mode | stat.S_IROTH | (stat.S_IXOTH if item.is_dir() else 0))
        yield folder, venv / "bin", folder / "collections", entry.pw_uid, entry.pw_gid
    finally:
        # What a failed run may have left on the user's node folder: its recorded server, its device holders.
        kill_node_servers(folder / "home" / ".local" / "share" / "specbench")
        shutil.rmtree(folder, ignore_errors=True)


def _as_user(consumer, cwd: Path, *args: str, timeout: int = 420) -> subprocess.CompletedProcess:
    """ansible-playbook ARGS as the user, in ``cwd`` (made empty and the user's when missing)."""
    folder, venv_bin, collections, uid, gid = consumer
    home = folder / "home"
    for path in (home, cwd):
        if not path.exists():
            path.mkdir(parents=True)
            os.chown(path, uid, gid)
    # nobody's home in the user database is /nonexistent, which Ansible's local connection reads for
    # its remote temporary folder: point that into the home this test gave the user, as a real
    # user's own home would be.
    env = {"HOME": str(home), "PATH": f"{venv_bin}:/usr/bin:/bin", "LANG": "C.UTF-8",
           "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_REMOTE_TMP": str(home / ".ansible" / "tmp")}
    return _run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--",
                 venv_bin / "ansible-playbook", *args], cwd=cwd, env=env, timeout=timeout)


def test_installed_collection_benches_from_an_empty_folder_as_a_user(consumer):
    """`ansible-playbook specbench.core.bench -e mode=baseline`, nothing else but two short levels
    and a free port: the embedded default runs, the results land in ./results of the empty folder,
    the node folder is the user's ~/.local/share/specbench, and the collection is left as installed."""
    folder, collections = consumer[0], consumer[2]
    work = folder / "work"
    port = free_port()
    started = time.monotonic()
    run = _as_user(consumer, work, "specbench.core.bench", "-e", "mode=baseline",
                   "-e", json.dumps({"bench_concurrency": [1, 4], "sglang_server_port": port}))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-8000:]
    assert "No inventory given" in output and "embedded default" in output, output[-4000:]
    results = sorted((work / "results").glob("*/localhost/baseline.json"))
    assert len(results) == 1, f"no results file under {work / 'results'}:\n{output[-4000:]}"
    assert f"results in {work / 'results'}/" in output
    doc = json.loads(results[0].read_text())
    assert doc["status"] == "complete" and doc["engine"] == "emulator", (doc["status"], doc["error"])
    assert [level["concurrency"] for level in doc["levels"]] == [1, 4], doc["levels"]
    assert all(level["error"] is None and level["output_tok_per_s"] > 0 for level in doc["levels"]), doc["levels"]
    assert results[0].stat().st_uid == consumer[3], "the results belong to the user who ran the playbook"
    node = folder / "home" / ".local" / "share" / "specbench"
    assert (node / "bin" / "specbench_client.pyz").is_file(), "the node folder defaults to ~/.local/share/specbench"
    written = [p for p in collections.rglob("*") if p.stat().st_mtime > time.time() - (time.monotonic() - started)
               and not p.is_dir()]
    assert not written, f"the run wrote into the installed collection: {written[:5]}"


def test_results_never_go_into_the_installed_collection(consumer):
    """Run from inside the installed collection, the default ./results would land there: refused
    before anything is launched, naming results_dir."""
    collections = consumer[2]
    inside = collections / "ansible_collections" / "specbench" / "core"
    run = _as_user(consumer, inside, "specbench.core.bench", "-e", "mode=baseline", timeout=180)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-4000:]
    assert "inside the installed collection" in output and "results_dir" in output, output[-4000:]
    assert "TASK [specbench.core.sglang_server" not in output, "refused only after the launch settings were checked"


@pytest.mark.parametrize("kind", ["cannot be made", "exists read-only"])
def test_an_unwritable_results_folder_fails_first_naming_results_dir(consumer, kind):
    folder = consumer[0]
    target = Path("/root/specbench-results") if kind == "cannot be made" else folder / "build"
    run = _as_user(consumer, folder / f"work-{kind.replace(' ', '-')}", "specbench.core.bench", "-e", "mode=baseline",
                   "-e", f"results_dir={target}", timeout=180)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-4000:]
    assert f"Cannot create or write the results folder {target}" in output, output[-4000:]
    assert "Nothing was launched" in output
    # Refused in the preflight play, after every input was checked and before anything ran on the node.
    assert "PLAY [Bench | Run one mode]" not in output and "Start the server" not in output, output[-4000:]
    assert "Kill the GPU holders" not in output, output[-4000:]


def test_a_host_pattern_that_matches_nothing_fails_at_once(consumer):
    folder = consumer[0]
    run = _as_user(consumer, folder / "work-pattern", "specbench.core.bench", "-e", "mode=baseline",
                   "-e", "bench_hosts=gpu_nodes", timeout=180)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-4000:]
    assert "matches" in output and "'gpu_nodes'" in output and "-i INVENTORY" in output, output[-4000:]

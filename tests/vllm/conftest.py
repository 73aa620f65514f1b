"""Fixtures of the vLLM tests: skip without the vLLM venv (CI builds it with make_venv.sh), the
tiny models once per session, and the pool of playbook runs the measuring tests share
(``vllm_pool``: session-scoped, so each run, and each server it launches, starts once for every
file here; tests/conftest.py keeps all of tests/vllm on one pytest worker). The bad inputs share
one multi-host run of their own. Any launched tree a run left is killed at the end."""
from __future__ import annotations

from pathlib import Path

import pytest
import vllmkit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def pytest_collection_modifyitems(config, items):
    del config
    why = vllmkit.venv_missing()
    if why:
        for item in items:
            if "tests/vllm/" in str(item.fspath):
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    vllmkit.PARSER_CACHE = tmp_path_factory.mktemp("vllm-parser-cache")
    return vllmkit.make_models()


class VllmRun:
    """One playbook run against a real vLLM server, with the server's counters scraped alongside."""

    def __init__(self, run, scraper, folder: Path, port: int):
        self.run, self.scraper, self.folder, self.port = run, scraper, folder, port
        self.node = folder / "node"
        self.record = vllmkit.launch_record(self.node, port)


# A pool run's limit, against a hang only: the compare run (three vLLM launches) takes ~400 s on a
# quiet 2-core machine, and ran past 880 s beside other work (load average 14: each launch ~200 s);
# kept under the test modules' 1800 s pytest timeout, which counts the first test's fixture setup.
RUN_TIMEOUT_S = 1700


def _runner(tmp_path_factory):
    folders: list[Path] = []

    def run(name: str, playbook: str, extravars: dict, **hostvars) -> VllmRun:
        folder = tmp_path_factory.mktemp(name)
        folders.append(folder)
        port = hostvars.pop("port", None) or vllmkit.free_port()
        with vllmkit.Scraper(port, folder / "test-scrapes") as scraper:
            result = vllmkit.run_playbook(folder, playbook, vllmkit.node_vars(folder, port, **hostvars),
                                          vllmkit.bench_vars(folder, **extravars), timeout=RUN_TIMEOUT_S)
        return VllmRun(result, scraper, folder, port)

    return run, folders


# The measuring runs, each started once per session and read by every test that needs it:
#   compare: playbooks/compare.yml, baseline, n-gram and a draft model on the chat API (one
#            server per mode, launched and torn down by the playbook, as on a node);
#   bench:   bench.yml, n-gram on the completions API (the one-mode entry point; n-gram's
#            multi-token chunks are the harder case for the client's counting), with a prompts
#            file of two categories (two_categories.jsonl) and vLLM's per-request speculation
#            figures (--per-request-spec-decode-metrics summary), for the per-category accept length.
CATEGORY_PROMPTS = Path(__file__).resolve().parent / "two_categories.jsonl"
POOL = {
    "compare": ("playbooks/compare.yml", {"compare_modes": ["baseline", "ngram", "draft"], "bench_api": "chat"}),
    "bench": ("bench.yml", {"mode": "ngram", "bench_api": "completions", "bench_prompts_file": str(CATEGORY_PROMPTS),
                            "vllm_server_extra_args": ["--enforce-eager", "--distributed-executor-backend", "uni",
                                                       "--per-request-spec-decode-metrics", "summary"]}),
}


@pytest.fixture(scope="session")
def vllm_pool(tmp_path_factory, models):
    """``vllm_pool(name)``: the run named in POOL, run the first time it is asked for."""
    del models
    run, folders = _runner(tmp_path_factory)
    done: dict[str, VllmRun] = {}

    def get(name: str) -> VllmRun:
        if name not in done:
            playbook, extravars = POOL[name]
            done[name] = run(f"pool-{name}", playbook, dict(extravars))
        return done[name]

    yield get
    for folder in folders:
        vllmkit.kill_recorded(folder / "node")

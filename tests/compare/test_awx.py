"""AWX: the execution environment builds a context, the surveys are valid and match the playbooks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.specbench.core.plugins.module_utils import specbench_client

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
AWX = ROOT / "awx"
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


def surveys() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((AWX / "surveys").glob("*.json"))}


def builtin_modes() -> set[str]:
    data = yaml.safe_load((ROOT / "roles" / "sglang_server" / "vars" / "main.yml").read_text())
    return set(data["sglang_server_builtin_modes"])


def test_ansible_builder_turns_the_execution_environment_into_a_build_context(tmp_path):
    context = tmp_path / "context"
    result = subprocess.run(
        [str(BIN / "ansible-builder"), "create", "-f", str(ROOT / "execution-environment.yml"), "-c", str(context),
         "--output-filename", "Containerfile"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    containerfile = (context / "Containerfile").read_text()
    assert "ansible-core==2.19.14" in containerfile and "ansible-runner==2.4.3" in containerfile
    assert "python3.11" in containerfile and "MPLBACKEND=Agg" in containerfile
    requirements = (context / "_build" / "requirements.txt").read_text()
    assert "matplotlib" in requirements and "ansible==" in requirements
    assert "psmisc" in (context / "_build" / "bindep.txt").read_text()


@pytest.mark.parametrize("name", ["bench", "compare", "report", "serve"])
def test_surveys_follow_awxs_survey_spec(name):
    spec = surveys()[name]
    assert spec["name"] and spec["description"] and spec["spec"]
    seen = set()
    for q in spec["spec"]:
        assert {"question_name", "variable", "type", "required"} <= set(q), q
        assert q["type"] in SURVEY_TYPES, q
        assert q["variable"] not in seen
        seen.add(q["variable"])
        if q["type"] in ("multiplechoice", "multiselect"):
            choices = q["choices"]
            assert isinstance(choices, list) and choices
            defaults = q["default"].split("\n") if q["type"] == "multiselect" else [q["default"]]
            assert set(defaults) <= set(choices), q
        if q["type"] == "integer":
            assert isinstance(q["default"], int) and q["min"] <= q["default"] <= q["max"]
        if q["type"] == "float":
            assert isinstance(q["default"], (int, float)) and q["min"] <= q["default"] <= q["max"]


def test_survey_choices_are_the_modes_and_apis_the_code_knows():
    modes = builtin_modes()
    s = surveys()
    bench = {q["variable"]: q for q in s["bench"]["spec"]}
    compare = {q["variable"]: q for q in s["compare"]["spec"]}
    assert set(bench["mode"]["choices"]) == modes
    assert set(compare["compare_modes"]["choices"]) == modes
    assert set(bench["bench_api"]["choices"]) == set(specbench_client.APIS)
    assert specbench_client.parse_levels(bench["bench_concurrency"]["default"]) == list(specbench_client.DEFAULT_LEVELS)
    # compare asks everything bench asks, except the single mode, plus its own compare_* knobs.
    own = {"compare_modes", "compare_launches", "compare_refine", "compare_refine_ratio", "compare_refine_budget_s"}
    assert set(compare) - own == set(bench) - {"mode"}
    assert own <= set(compare)
    # serve asks the role's own knobs, with the choices its argument spec allows.
    serve = {q["variable"]: q for q in s["serve"]["spec"]}
    spec = yaml.safe_load((ROOT / "roles/serve/meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    for name, question in serve.items():
        if name in spec and question["type"] == "multiplechoice":
            assert question["choices"] == spec[name]["choices"], name
    assert set(serve) - {"run_id"} <= set(spec)


def test_job_templates_name_playbooks_and_surveys_that_exist_and_pass_syntax_check():
    data = yaml.safe_load((AWX / "job_templates.yml").read_text())
    for jt in data["specbench_awx_job_templates"]:
        assert (ROOT / jt["playbook"]).is_file(), jt
        if jt["survey"]:
            assert (AWX / jt["survey"]).is_file(), jt
    names = {jt["name"] for jt in data["specbench_awx_job_templates"]}
    for node in data["specbench_awx_workflow"]["nodes"]:
        assert node["unified_job_template"]["name"] in names
    result = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "awx/configure.yml"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_bench_runs_through_ansible_runner_as_awx_does_and_hands_on_its_stats(tmp_path):
    """Survey answers arrive as AWX sends them: text as strings, integers and floats as numbers,
    an unanswered optional text as an empty string."""
    from compare_kit import node_vars, run_playbook
    from specbench_testkit import free_port, inventory, kill_node_servers

    node = tmp_path / "node"
    answers = {"mode": "eagle3", "bench_concurrency": "1,2", "bench_input_len": 64, "bench_output_len": 64,
               "bench_warmup_s": 0.5, "bench_window_s": 1.0, "bench_api": "chat", "run_id": "",
               "results_dir": str(tmp_path / "results")}
    try:
        run = run_playbook(tmp_path, "bench.yml", inventory({"node-a": node_vars(node, free_port())}),
                           extravars=answers, timeout=300)
    finally:
        kill_node_servers(node)
    assert run.rc == 0 and run.status == "successful", run.stdout[-3000:]
    (results_file,) = (tmp_path / "results").glob("*/node-a/eagle3.json")
    results = json.loads(results_file.read_text())
    assert [lv["concurrency"] for lv in results["levels"]] == [1, 2]
    # bench.yml records the GPU state the mode started from and left behind.
    assert results["gpu"]["before"]["clean"] and results["gpu"]["after"]["clean"]
    assert results["gpu"]["killed_after"], "the teardown after the sweep killed the server"
    # What AWX keeps: the extra vars, the events, the stats event's artifact data.
    artifacts = next((run.pdd / "artifacts").iterdir())
    assert json.loads((run.pdd / "env" / "extravars").read_text())["bench_concurrency"] == "1,2"
    assert (artifacts / "rc").read_text().strip() == "0" and (artifacts / "status").read_text().strip() == "successful"
    saved = [json.loads(p.read_text()) for p in (artifacts / "job_events").glob("*.json")]
    (stats_event,) = [e for e in saved if e.get("event") == "playbook_on_stats"]
    stats = stats_event["event_data"]["artifact_data"]
    assert stats == run.artifact_stats() and stats, "bench.yml set no per_host: false stats"
    assert "specbench_bench" in stats

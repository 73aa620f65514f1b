"""AWX: the execution environment builds a context, the surveys are valid and match the playbooks."""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from specbench_testkit import build_collection

from ansible_collections.specbench.core.plugins.module_utils import specbench_client

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
AWX = ROOT / "awx"
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


def surveys() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((AWX / "surveys").glob("*.json"))}


def builtin_modes(role: str = "sglang_server") -> set[str]:
    data = yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text())
    return set(data[f"{role}_builtin_modes"])


def job_templates() -> dict:
    return yaml.safe_load((AWX / "job_templates.yml").read_text())


def playbook_file(relative: str) -> Path:
    """The job template's playbook in the checkout. bench.yml moves to playbooks/bench.yml (the root
    bench.yml then imports it); until then the root file is the same playbook."""
    path = ROOT / relative
    if not path.is_file() and relative == "playbooks/bench.yml":
        path = ROOT / "bench.yml"
    return path


def tasks_of(items: list | None):
    """Every task of a task list, into block/rescue/always."""
    for task in items or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from tasks_of(task.get(key))


def roles_run(playbook: Path) -> set[tuple[str, str]]:
    """(role folder, entry point) of every specbench.core role the playbook includes, imports or lists
    (following import_playbook)."""
    found = set()
    for play in yaml.safe_load(playbook.read_text()):
        imported = play.get("ansible.builtin.import_playbook") or play.get("import_playbook")
        if imported:
            found |= roles_run((playbook.parent / imported).resolve())
            continue
        for role in play.get("roles", []):
            found.add((str(role["role"] if isinstance(role, dict) else role), "main"))
        for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
            for task in tasks_of(play.get(section)):
                for action in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                    if action in task:
                        found.add((task[action]["name"], task[action].get("tasks_from", "main")))
    return {(name.removeprefix("specbench.core."), entry) for name, entry in found}


def spec_options(playbook: Path) -> dict[str, dict]:
    """The argument_specs options of every role entry point the playbook runs (an entry point without its
    own spec is checked against main's, as ansible-core does for tasks_from)."""
    options: dict[str, dict] = {}
    for role, entry in sorted(roles_run(playbook)):
        specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        for name, spec in (specs.get(entry) or specs["main"]).get("options", {}).items():
            options.setdefault(name, spec)
    return options


# Variables a playbook itself reads, not (or not only) a role's option, each with why.
PLAYBOOK_VARIABLES = {
    # bench.yml picks one run id for every host from it (specbench_run_id, a UTC timestamp when empty);
    # compare and report take it through role compare's spec too.
    "run_id": {"type": "str"},
    # bench.yml's results folder (specbench_results_dir); every job template passes it as extra_vars.
    "results_dir": {"type": "path"},
    # Every playbook's hosts pattern (default all).
    "bench_hosts": {"type": "str"},
}

# The argument spec types each survey answer type can meet: AWX sends text as a string (a list spec splits
# "1,2,5" on commas), integers and floats as numbers, a multiplechoice as one string (a bool spec
# converts "true"/"false"), a multiselect as a list.
COMPATIBLE = {
    "text": {"str", "path", "list", "raw"},
    "textarea": {"str", "path", "list", "raw"},
    "password": {"str", "raw"},
    "integer": {"int", "float", "raw"},
    "float": {"float", "raw"},
    "multiplechoice": {"str", "bool", "raw"},
    "multiselect": {"list", "raw"},
}


def survey_problems(survey: dict, playbook: Path) -> list[str]:
    """Every question of the survey the playbook would not take as asked: an unknown variable, a type its
    argument spec refuses, a choice outside the spec's choices."""
    options = spec_options(playbook) | PLAYBOOK_VARIABLES
    problems = []
    for q in survey["spec"]:
        var, kind = q["variable"], q["type"]
        if var not in options:
            problems.append(f"{var}: no role {playbook.name} runs has it in its argument_specs, nor is it a playbook "
                            f"variable ({', '.join(sorted(PLAYBOOK_VARIABLES))})")
            continue
        spec = options[var]
        spec_type = spec.get("type", "str")
        if spec_type not in COMPATIBLE.get(kind, set()):
            problems.append(f"{var}: a {kind} answer does not fit its argument spec's type {spec_type}")
        choices = q.get("choices") if kind in ("multiplechoice", "multiselect") else None
        if spec_type == "bool" and choices is not None and not set(choices) <= {"true", "false"}:
            problems.append(f"{var}: choices {choices} for a bool option (use true and false)")
        if spec.get("choices"):
            if choices is None:
                problems.append(f"{var}: free {kind} for an option with choices {spec['choices']}")
            elif not set(choices) <= set(spec["choices"]):
                problems.append(f"{var}: choices {sorted(set(choices) - set(spec['choices']))} are not among the "
                                f"argument spec's {spec['choices']}")
    return problems


def engines_accepted(tasks_file: str, task_name: str) -> set[str]:
    """The engines a preflight's assert accepts (its `in [...]` list or `== '...'`)."""
    tasks = yaml.safe_load((ROOT / tasks_file).read_text())
    (task,) = [t for t in tasks if t.get("name") == task_name]
    accepted = set()
    for condition in task["ansible.builtin.assert"]["that"]:
        if "engine" not in condition:
            continue
        listed = re.search(r"engine\S*(?: \| default\([^)]*\))? in (\[[^\]]*\])", condition)
        single = re.search(r"engine\S* == '([a-z]+)'", condition)
        if listed:
            accepted |= set(ast.literal_eval(listed.group(1)))
        elif single:
            accepted.add(single.group(1))
    assert accepted, f"{task_name} in {tasks_file} names no engine: update engines_accepted"
    return accepted


def galaxy_version() -> str:
    return yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]


def requirement_names(lines: list[str]) -> list[str]:
    """The distribution names of pip requirement lines (comments and blank lines left out)."""
    names = []
    for line in lines:
        requirement = line.split("#", 1)[0].strip()
        if requirement:
            names.append(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower())
    return names


def test_ansible_builder_turns_the_execution_environment_into_a_build_context(tmp_path):
    """The EE as a user builds it: the collection tarball next to execution-environment.yml, then
    ansible-builder create; the galaxy stage installs the tarball, the builder stage introspects it."""
    tarball = f"specbench-core-{galaxy_version()}.tar.gz"
    built = build_collection(tmp_path)
    assert built.name == tarball, f"ansible-galaxy built {built.name}, not {tarball} (execution-environment.yml names it)"
    # additional_build_files' src is relative to the definition: the definition sits next to the tarball,
    # as it does at the repository root after `ansible-galaxy collection build`.
    shutil.copy(ROOT / "execution-environment.yml", tmp_path / "execution-environment.yml")
    context = tmp_path / "context"
    result = subprocess.run(
        [str(BIN / "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", str(context),
         "--output-filename", "Containerfile"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    build = context / "_build"
    containerfile = (context / "Containerfile").read_text()
    assert re.search(r"ANSIBLE_INSTALL_REFS=\"ansible-core>=2\.19[^\"]* ansible-runner>=", containerfile), containerfile
    assert "python3.11" in containerfile and "MPLBACKEND=Agg" in containerfile
    # awx/configure.yml's default results folder exists in the image, writable by group 0 (AWX's job user).
    (settings,) = yaml.safe_load((AWX / "configure.yml").read_text())
    assert f"mkdir -p {settings['vars']['awx_results_dir']}" in containerfile
    # Not the whole `ansible` package, no caps: only ansible-core, ansible-runner and the collections.
    assert not re.search(r"\bansible==|\bansible>=|ansible-core[^\s\"]*<", containerfile), containerfile
    # The galaxy stage: the tarball copied in, and installed from the requirements with community.proxmox.
    assert (build / "collections" / tarball).is_file()
    galaxy = yaml.safe_load((build / "requirements.yml").read_text())["collections"]
    by_name = {c["name"]: c for c in galaxy}
    assert by_name[f"collections/{tarball}"]["type"] == "file", galaxy
    assert "<" not in str(by_name["community.proxmox"].get("version", "")), galaxy
    assert set(by_name) == {f"collections/{tarball}", "community.proxmox"}, "only what the playbooks use"
    # No Python or system requirements of the definition's own: they come from the collection's meta.
    assert not (build / "requirements.txt").exists() and not (build / "bindep.txt").exists()
    # Run the galaxy stage's install of the tarball (WORKDIR /build in the image; Galaxy itself is not
    # reachable here, so community.proxmox is left out), then the builder stage's introspection.
    local = tmp_path / "local-requirements.yml"
    local.write_text(yaml.safe_dump({"collections": [c for c in galaxy if c.get("type") == "file"]}))
    collections = tmp_path / "usr-share-ansible-collections"
    installed = subprocess.run(
        # --force: a specbench.core of the same version on the user's collections paths would make it "nothing to do".
        [str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-r", str(local), "-p", str(collections)],
        cwd=build, capture_output=True, text=True, timeout=120, check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (collections / "ansible_collections" / "specbench" / "core" / "MANIFEST.json").is_file(), installed.stdout
    pip_out, bindep_out = tmp_path / "pip.txt", tmp_path / "bindep.txt"
    introspected = subprocess.run(
        [str(BIN / "ansible-builder"), "introspect", "--sanitize", "--write-pip", str(pip_out),
         "--write-bindep", str(bindep_out), str(collections)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert introspected.returncode == 0, introspected.stdout + introspected.stderr
    pip = pip_out.read_text().splitlines()
    names = requirement_names(pip)
    assert {"matplotlib", "paramiko", "nvidia-ml-py"} <= set(names), pip
    assert not {"ansible", "ansible-core", "ansible-base"} & set(names), pip
    assert all("specbench.core" in line for line in pip if line.strip()), pip
    bindep = bindep_out.read_text()
    for package in ("psmisc", "procps-ng [platform:rpm]", "openssh-clients [platform:rpm]"):
        assert package in bindep, bindep


def test_the_collections_ee_requirements_are_lower_bounds_and_cover_its_imports():
    """meta/ee-requirements.txt: no pins or caps, no ansible; every third-party module the plugins import
    on the controller is listed (node-only engines excepted)."""
    meta = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    assert meta["version"] == 1
    assert meta["dependencies"] == {"python": "meta/ee-requirements.txt", "system": "meta/ee-bindep.txt"}
    lines = [ln.split("#", 1)[0].strip() for ln in (ROOT / "meta" / "ee-requirements.txt").read_text().splitlines()]
    lines = [ln for ln in lines if ln]
    for line in lines:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+>=[0-9][0-9.]*", line), f"{line}: lower bounds only"
    names = set(requirement_names(lines))
    assert not {"ansible", "ansible-core"} & names
    # Import name -> distribution name, where they differ.
    distribution = {"pynvml": "nvidia-ml-py", "yaml": "pyyaml"}
    # The engines themselves: imported by the flag checks on the node where the engine is installed.
    node_only = {"sglang", "sglang_emulator", "vllm"}
    # ansible-core brings these.
    with_ansible = {"ansible", "ansible_collections", "jinja2", "yaml", "cryptography", "packaging"}
    imported = set()
    for path in (ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - node_only - with_ansible - {"__future__"}
    missing = {distribution.get(m, m) for m in third_party} - names
    assert not missing, f"plugins import {sorted(missing)}: add them to meta/ee-requirements.txt"


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


def test_survey_choices_are_the_modes_engines_and_apis_the_code_knows():
    """One mode question for both engines: the modes SGLang and vLLM know together (the chosen engine's
    preflight refuses a mode it does not know, before anything runs); the engines the preflights accept."""
    modes = builtin_modes("sglang_server") | builtin_modes("vllm_server")
    s = surveys()
    bench = {q["variable"]: q for q in s["bench"]["spec"]}
    compare = {q["variable"]: q for q in s["compare"]["spec"]}
    assert set(bench["mode"]["choices"]) == modes
    assert set(compare["compare_modes"]["choices"]) == modes
    for question in (bench["mode"], compare["compare_modes"]):
        for engine_modes in (builtin_modes("sglang_server"), builtin_modes("vllm_server")):
            # The description says which engine knows which mode.
            assert all(m in question["question_description"] for m in engine_modes), question
    bench_engines = (engines_accepted("roles/sglang_server/tasks/preflight.yml", "sglang_server | Check the engine")
                     | engines_accepted("roles/vllm_server/tasks/preflight.yml",
                                        "vllm_server | Check the node folder, the engine and the launcher"))
    assert bench_engines == {"emulator", "sglang", "vllm", "external"}
    assert set(bench["engine"]["choices"]) == bench_engines
    compare_engines = engines_accepted("roles/compare/tasks/preflight.yml", "Compare | Check the engine")
    assert set(compare["engine"]["choices"]) == compare_engines
    # A survey answer overrides the inventory's engine, so the question must be answered (no empty string).
    assert bench["engine"]["required"] and compare["engine"]["required"]
    assert "base_url" in bench and not bench["base_url"]["required"]
    assert set(bench["bench_api"]["choices"]) == set(specbench_client.APIS)
    assert specbench_client.parse_levels(bench["bench_concurrency"]["default"]) == list(specbench_client.DEFAULT_LEVELS)
    # compare asks everything bench asks, except the single mode and the external server, plus its own knobs.
    own = {"compare_modes", "compare_launches", "compare_refine", "compare_refine_ratio", "compare_refine_budget_s"}
    assert set(compare) - own == set(bench) - {"mode", "base_url"}
    assert own <= set(compare)


@pytest.mark.parametrize("template", [jt["name"] for jt in job_templates()["specbench_awx_job_templates"] if jt["survey"]])
def test_every_survey_question_is_an_input_of_its_playbook(template):
    """Each survey variable is an option of a role the template's playbook runs (its argument_specs) or a
    playbook variable, with an answer type the spec takes and choices inside the spec's."""
    (jt,) = [t for t in job_templates()["specbench_awx_job_templates"] if t["name"] == template]
    playbook = playbook_file(jt["playbook"])
    assert roles_run(playbook), f"{playbook} runs no specbench.core role?"
    survey = json.loads((AWX / jt["survey"]).read_text())
    assert survey_problems(survey, playbook) == []


def test_the_survey_check_catches_a_wrong_survey():
    """The check above fails on a survey that asks what the playbook does not take."""
    jt = next(t for t in job_templates()["specbench_awx_job_templates"] if t["survey"] == "surveys/bench.json")
    playbook = playbook_file(jt["playbook"])
    good = json.loads((AWX / "surveys" / "bench.json").read_text())
    assert survey_problems(good, playbook) == []
    wrong = copy.deepcopy(good)
    by_var = {q["variable"]: q for q in wrong["spec"]}
    by_var["bench_concurrency"]["variable"] = "bench_concurency"  # a typo: the playbook never reads it
    by_var["bench_input_len"]["type"] = "multiselect"  # a list for an int
    by_var["bench_api"]["choices"] = [*by_var["bench_api"]["choices"], "grpc"]  # not among the spec's choices
    by_var["bench_window_s"]["type"] = "password"  # a string for a float
    problems = survey_problems(wrong, playbook)
    assert len(problems) == 4, problems
    for expected in ("bench_concurency: no role", "bench_input_len: a multiselect answer", "['grpc']",
                     "bench_window_s: a password answer"):
        assert any(expected in p for p in problems), (expected, problems)
    # A bool option asked with other choices than true/false, and an option with choices asked as free text.
    compare = json.loads((AWX / "surveys" / "compare.json").read_text())
    refine = next(q for q in compare["spec"] if q["variable"] == "compare_refine")
    refine["choices"] = ["no", "yes"]
    refine["default"] = "no"
    api = next(q for q in compare["spec"] if q["variable"] == "bench_api")
    api.update(type="text", min=0, max=16)
    api.pop("choices")
    problems = survey_problems(compare, playbook_file("playbooks/compare.yml"))
    assert len(problems) == 2 and "compare_refine: choices" in problems[0] + problems[1], problems
    assert any("bench_api: free text" in p for p in problems), problems


def test_job_templates_name_playbooks_and_surveys_that_exist_and_pass_syntax_check():
    data = job_templates()
    for jt in data["specbench_awx_job_templates"]:
        assert playbook_file(jt["playbook"]).is_file(), jt
        if jt["survey"]:
            assert (AWX / jt["survey"]).is_file(), jt
    (bench,) = [jt for jt in data["specbench_awx_job_templates"] if jt["name"] == "specbench bench"]
    assert bench["playbook"] == "playbooks/bench.yml", "the collection's playbook, not the checkout's root one"
    names = {jt["name"] for jt in data["specbench_awx_job_templates"]}
    for node in data["specbench_awx_workflow"]["nodes"]:
        assert node["unified_job_template"]["name"] in names
    # compare, then serve on success (it reads the compare node's run id: test_serve_runs runs the two in this
    # order through ansible-runner with the handed-over stats); no teardown after serve, one after a failed compare.
    nodes = {n["identifier"]: n for n in data["specbench_awx_workflow"]["nodes"]}
    assert nodes["compare"]["related"] == {"success_nodes": [{"identifier": "serve"}],
                                           "failure_nodes": [{"identifier": "teardown"}]}
    assert nodes["serve"]["unified_job_template"]["name"] == "specbench serve" and not nodes["serve"].get("related")
    serve_defaults = yaml.safe_load((ROOT / "roles" / "serve" / "defaults" / "main.yml").read_text())
    assert "specbench_compare" in serve_defaults["serve_run_id"]
    result = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "awx/configure.yml"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def configure_tasks() -> tuple[dict[str, dict], dict]:
    (play,) = yaml.safe_load((AWX / "configure.yml").read_text())
    return {t["name"]: t for t in play["tasks"]}, play["vars"]


def test_every_job_template_keeps_its_results_in_the_lasting_results_dir():
    """results_dir reaches every job as extra_vars from one template variable, an absolute path in the
    execution environment (a mounted volume), so report and serve read what compare wrote."""
    tasks, settings = configure_tasks()
    job_template = tasks["AWX | Create the job templates with their surveys"]["awx.awx.job_template"]
    assert job_template["extra_vars"] == {"results_dir": "{{ awx_results_dir }}"}
    assert settings["awx_results_dir"].startswith("/") and "results" in settings["awx_results_dir"]
    # The playbooks read results_dir through role run_context, which every one of them runs first.
    for name in ("bench", "compare", "report", "serve"):
        assert "results_dir" in spec_options(ROOT / f"playbooks/{name}.yml"), name
    defaults = yaml.safe_load((ROOT / "roles" / "run_context" / "defaults" / "main.yml").read_text())
    assert "results_dir" in defaults["run_context_results_dir"]
    # The image is a full reference the user gives; the example in the comments is one.
    assert settings["awx_ee_image"] == ""
    assert "quay.io/example/specbench-ee:" in (AWX / "configure.yml").read_text()


def test_configure_refuses_an_image_awx_cannot_pull_before_it_calls_awx(tmp_path):
    """A bare local tag stops configure.yml with a message naming the fix; a full reference passes the
    checks and reaches the AWX API (here a closed loopback port)."""
    env = {**os.environ, "HOME": str(tmp_path), "CONTROLLER_HOST": "https://127.0.0.1:9", "CONTROLLER_VERIFY_SSL": "false",
           "CONTROLLER_USERNAME": "admin", "CONTROLLER_PASSWORD": "x", "ANSIBLE_NOCOLOR": "1"}
    base = [str(BIN / "ansible-playbook"), "awx/configure.yml", "-e", "awx_project_scm_url=https://git.example.org/s.git",
            "-e", "awx_inventory=GPU nodes"]

    def run(image: str) -> subprocess.CompletedProcess:
        return subprocess.run([*base, "-e", f"awx_ee_image={image}"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120, check=False)

    for bad in ("specbench-ee:0.1.0", "quay.io/example/specbench-ee", ""):
        result = run(bad)
        assert result.returncode != 0
        assert "is not a full image reference" in result.stdout and "quay.io/example/specbench-ee:0.1.0" in result.stdout, (
            bad, result.stdout[-2000:])
        assert "Create the execution environment" not in result.stdout
    good = run("registry.example.org:5000/team/specbench-ee:0.1.0")
    assert good.returncode != 0 and "is not a full image reference" not in good.stdout
    assert "TASK [AWX | Create the execution environment]" in good.stdout, good.stdout[-2000:]


@pytest.mark.slow
def test_bench_runs_through_ansible_runner_as_awx_does_and_hands_on_its_stats(tmp_path):
    """Survey answers arrive as AWX sends them: text as strings, integers and floats as numbers,
    an unanswered optional text as an empty string."""
    from compare_kit import node_vars, run_playbook
    from specbench_testkit import free_port, inventory, kill_node_servers

    node = tmp_path / "node"
    # results_dir as the job template passes it (extra_vars), the rest as the survey does.
    answers = {"engine": "emulator", "mode": "eagle3", "base_url": "", "bench_concurrency": "1,2", "bench_input_len": 64,
               "bench_output_len": 64, "bench_warmup_s": 0.5, "bench_window_s": 1.0, "bench_api": "chat", "run_id": "",
               "results_dir": str(tmp_path / "results")}
    playbook = playbook_file("playbooks/bench.yml").relative_to(ROOT)
    try:
        run = run_playbook(tmp_path, str(playbook), inventory({"node-a": node_vars(node, free_port())}),
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

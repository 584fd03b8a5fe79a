"""The GitHub Actions workflows and the Binder configuration, checked offline."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def load(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def steps(workflow: dict):
    for job in workflow["jobs"].values():
        yield from job.get("steps", [])


def test_zizmor_finds_no_security_issue():
    result = subprocess.run([BIN / "zizmor", "--offline", "--no-progress", *map(str, WORKFLOWS)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_workflows_match_the_github_schema():
    result = subprocess.run([BIN / "check-jsonschema", "--builtin-schema", "vendor.github-workflows",
                             *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_and_permissions_start_empty(path):
    workflow = load(path.name)
    assert workflow["permissions"] == {}, "grant permissions per job only"
    for step in steps(workflow):
        if "uses" in step:
            assert PINNED.match(step["uses"]), step["uses"]
    for name, job in workflow["jobs"].items():
        assert "permissions" in job, f"job {name} must state its permissions"


def test_pull_requests_run_make_test_with_read_only_access_and_no_secrets():
    workflow = load("test.yml")
    assert "pull_request" in workflow["on"]
    job = workflow["jobs"]["test"]
    assert job["permissions"] == {"contents": "read"}
    assert any(s.get("run", "").strip() == "make test" for s in job["steps"])
    assert "secrets." not in (ROOT / ".github" / "workflows" / "test.yml").read_text()
    keys = " ".join(s["with"]["key"] for s in job["steps"] if "actions/cache" in s.get("uses", ""))
    assert "requirements.txt" in keys and "requirements-dev.txt" in keys  # pip cache keyed on them


def test_book_is_built_on_the_configured_runner_and_deployed_to_pages():
    workflow = load("book.yml")
    assert workflow["on"]["push"]["branches"] == ["main"]
    build = workflow["jobs"]["build"]
    assert build["runs-on"] == "${{ vars.BOOK_RUNNER || 'ubuntu-24.04' }}"  # one place; CPU fallback
    runs = [s.get("run", "") for s in build["steps"]]
    assert "make book CONSTRAINTS=" in runs and "make book" in runs and "make notebooks" in runs
    assert workflow["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    publish = workflow["jobs"]["notebooks"]["steps"][-1]["run"]
    assert "notebooks" in publish and "git push" in publish


def test_weekly_colab_check_runs_the_notebooks_and_opens_an_issue_on_failure():
    workflow = load("colab-check.yml")
    assert workflow["on"]["schedule"][0]["cron"].split()[4] in {"0", "1", "2", "3", "4", "5", "6"}
    runs = " ".join(s.get("run", "") for s in steps(workflow))
    assert "run_notebooks.py" in runs and "attnbook" not in runs.split("pip install", 1)[1].split("\n")[0]
    report = workflow["jobs"]["report"]
    assert report["if"] == "failure()" and report["permissions"] == {"issues": "write"}


def test_binder_installs_every_dependency_and_the_package():
    """The notebooks' binder/requirements.txt (make notebooks writes it) has every dependency and attnbook pinned."""
    from packaging.requirements import Requirement

    import tomllib

    sys.path.insert(0, str(ROOT / "code" / "booktools"))
    import notebooks

    text = notebooks.binder_requirements("https://github.com/o/r", "a" * 40)
    reqs = [Requirement(line) for line in text.splitlines() if line.strip() and not line.startswith(("#", "-"))]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {Requirement(d).name.lower() for d in project["dependencies"]}
    assert needed <= {r.name.lower() for r in reqs}, needed - {r.name.lower() for r in reqs}
    assert [r.url for r in reqs if r.name == "attnbook"] == [f"git+https://github.com/o/r.git@{'a' * 40}"]
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["launch_buttons"]["binderhub_url"] == "https://mybinder.org"


def test_launch_buttons_open_the_generated_notebooks():
    """Colab and Binder both open the .ipynb on the notebooks branch, not the MyST source."""
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT / "code" / "booktools"))
    import offline_book

    buttons = [{"url": "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/chapters/softmax.md"},
               {"url": "https://colab.research.google.com/github/o/r/blob/main/chapters/softmax.md"}]
    app = SimpleNamespace(config=SimpleNamespace(attnbook_notebooks_branch="notebooks"))
    offline_book._launch_notebooks(app, "chapters/softmax", "page.html", {"header_buttons": [{"buttons": buttons}]}, None)
    assert [b["url"] for b in buttons] == [
        "https://mybinder.org/v2/gh/o/r/notebooks?urlpath=lab/tree/chapters/softmax.ipynb",
        "https://colab.research.google.com/github/o/r/blob/notebooks/chapters/softmax.ipynb"]

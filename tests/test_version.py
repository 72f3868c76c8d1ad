"""What produced a result: the code's version, and its git commit where it runs from a checkout."""

from __future__ import annotations

import json
import subprocess

import pytest

from specscope import __version__, version
from specscope.cli import main


@pytest.fixture
def fresh():
    """code_version recomputed for each case (it is cached for a process)."""
    version.code_version.cache_clear()
    yield version.code_version
    version.code_version.cache_clear()


def test_a_checkout_names_its_commit_and_whether_tracked_files_changed(monkeypatch, fresh):
    top = str(version.PACKAGE.parent.parent)
    monkeypatch.setattr(version, "_git", lambda *a: {"--show-toplevel": top, "--short": "45a8262"}.get(a[1], "")
                        if a[0] == "rev-parse" else "")
    assert fresh() == f"specscope {__version__} (git 45a8262)"
    fresh.cache_clear()
    monkeypatch.setattr(version, "_git", lambda *a: {"--show-toplevel": top, "--short": "45a8262"}.get(a[1], "")
                        if a[0] == "rev-parse" else " M src/specscope/sim/grid.py")
    assert fresh() == f"specscope {__version__} (git 45a8262, modified)"


def test_a_package_in_another_projects_tree_or_without_git_names_the_version_alone(monkeypatch, fresh, tmp_path):
    monkeypatch.setattr(version, "_git", lambda *a: str(tmp_path) if a[1] == "--show-toplevel" else "abc1234")
    assert fresh() == f"specscope {__version__}"  # a venv inside the user's repository: not our commit
    fresh.cache_clear()
    monkeypatch.setattr(version, "_git", lambda *a: None)  # not a work tree
    assert fresh() == f"specscope {__version__}"
    fresh.cache_clear()

    def missing(*args):
        raise FileNotFoundError("git")
    monkeypatch.setattr(version, "_git", missing)
    assert fresh() == f"specscope {__version__}"
    fresh.cache_clear()

    def slow(*args):
        raise subprocess.TimeoutExpired("git", 10)
    monkeypatch.setattr(version, "_git", slow)
    assert fresh() == f"specscope {__version__}"


def test_version_option_prints_it(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == version.code_version()


def test_a_fitted_cost_model_names_the_code_that_fitted_it():
    from specscope.costmodel.linear import LinearCostModel, linear_from_json
    from specscope.costmodel.registry import resolve_cost_model

    fitted = LinearCostModel("m", 1e-3, 1e-5, 0.0, 0.0, made_by="specscope 9 (git 1)")
    assert linear_from_json(json.loads(json.dumps(fitted.describe())), "m.json").made_by == "specscope 9 (git 1)"
    assert "made_by" not in resolve_cost_model("h100-llama3.1-8b").describe()  # a preset was fitted by no one here

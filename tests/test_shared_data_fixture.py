"""The `shared_data` fixture: under CI=true a missing ../shared/data fails the run (a broken data
path must not turn the accuracy tests into green skips); elsewhere it skips."""

import pathlib
import shutil
import subprocess
import sys

import pytest
from conftest import SHARED_DATA_ENV, shared_data_dir, shared_data_missing

NEEDS_DATA = "def test_needs_data(shared_data):\n    assert shared_data.is_dir()\n"


@pytest.mark.parametrize(
    "env, expect",
    [
        ({"CI": "true"}, "fail"),
        ({"CI": "1"}, "fail"),
        ({"CI": "TRUE"}, "fail"),
        ({}, "skip"),
        ({"CI": "false"}, "skip"),
        ({"CI": ""}, "skip"),
    ],
)
def test_missing_data_fails_only_in_ci(tmp_path, env, expect):
    assert shared_data_missing(tmp_path / "nowhere", env) == expect
    assert shared_data_missing(tmp_path, env) is None  # present: run, whatever CI says


def test_path_override(tmp_path):
    assert shared_data_dir({SHARED_DATA_ENV: str(tmp_path)}) == tmp_path
    assert shared_data_dir({}).parts[-2:] == ("shared", "data")


def _run_pytest(tmp_path: pathlib.Path, ci: str, data: pathlib.Path) -> subprocess.CompletedProcess:
    """A one-test suite using this conftest, run in a subprocess with CI and the data path set."""
    shutil.copy(pathlib.Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_needs_data.py").write_text(NEEDS_DATA)
    env = {"PATH": "/usr/bin:/bin", "CI": ci, SHARED_DATA_ENV: str(data)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "test_needs_data.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )


def test_fixture_fails_in_ci_and_skips_elsewhere(tmp_path):
    wrong = tmp_path / "no_such_data"
    ci = _run_pytest(tmp_path, "true", wrong)
    assert ci.returncode == 1, ci.stdout
    assert "1 error" in ci.stdout and str(wrong) in ci.stdout and "../shared/data" in ci.stdout
    local = _run_pytest(tmp_path, "", wrong)
    assert local.returncode == 0 and "1 skipped" in local.stdout, local.stdout
    present = _run_pytest(tmp_path, "true", tmp_path)
    assert present.returncode == 0 and "1 passed" in present.stdout, present.stdout

"""The run directory contract (models.base.rundir) against a run directory of today's files.

tests/fixtures/rundir_v0 was written by a real tiny run before the module existed
(`python -m experiments.train model.d_model=32 model.n_layers=2 model.n_heads=4 model.seq_len=32
train.batch_size=8 train.eval_tokens=512 train.progress_every_s=0 train.tokens=20000`):
summary.json and .hydra/ as written, metrics.jsonl trimmed to steps 1, 2, 3, 50, 79 with the
mfu of step 2 stored as null (a NaN metric, as the writer stores it) and a torn last line (a kill
in mid-write). Old directories must keep reading through the typed summary, the one metrics
reader and analysis.core.runs.load.
"""

import json
import math
import shutil
import warnings
from pathlib import Path

import pytest

from analysis.core import runs
from experiments.sweeps.runs import read_status
from experiments.train.metrics import MetricsLog
from models.base import rundir
from models.base.rundir import (
    MetricsWriter,
    ReadStatus,
    RunDir,
    RunStatus,
    RunSummary,
    read_metrics,
)

FIXTURE = Path(__file__).parent / "fixtures" / "rundir_v0"
FIXTURE_STEPS = [1, 2, 3, 50, 79]


@pytest.fixture
def run_copy(tmp_path):
    """A writable copy of the fixture (tests that write must not touch the committed files)."""
    dst = tmp_path / "sweep" / "rundir_v0"
    shutil.copytree(FIXTURE, dst)
    return dst


def test_file_names_are_todays():
    assert (rundir.SUMMARY_FILE, rundir.METRICS_FILE) == ("summary.json", "metrics.jsonl")
    assert Path(rundir.HYDRA_CONFIG) == Path(".hydra/config.yaml")
    assert (rundir.CHECKPOINTS_DIR, rundir.LOCK_FILE, rundir.LAUNCHES_FILE) == (
        "checkpoints",
        ".run.lock",
        "launches.jsonl",
    )
    assert rundir.lock_name(0) == ".run.lock" and rundir.lock_name(2) == ".run.lock.2"
    assert rundir.console_log_name("train") == "train.log"
    assert rundir.console_log_name("train", 1) == "train.1.log"
    for name in rundir.MARKERS:
        assert (FIXTURE / name).is_file()


def test_status_strings_are_todays():
    on_disk = {"completed", "diverged", "failed", "preempted", "stopped", "running"}
    assert {s.value for s in RunStatus} == on_disk
    assert {s.value for s in ReadStatus} == {"unfinished", "corrupt-summary", "unknown", "new", "interrupted"}
    assert RunStatus.COMPLETED == "completed" and f"{RunStatus.FAILED}" == "failed"
    assert json.dumps({"status": RunStatus.PREEMPTED}) == '{"status": "preempted"}'


def test_summary_of_an_old_run_reads_typed():
    s = RunSummary.from_json(FIXTURE / "summary.json")
    raw = json.loads((FIXTURE / "summary.json").read_text())
    assert s.status is RunStatus.COMPLETED and s.completed
    assert s.final_eval_loss == raw["final_eval_loss"] and s.n_params == raw["n_params"]
    assert s.model["d_model"] == 32 and s.steps_done == s.steps == 79
    assert s.extra == {} and s.present == set(raw)  # every key of today's trainer is a field
    assert RunDir(FIXTURE).status is RunStatus.COMPLETED
    assert RunDir(FIXTURE).read_summary() == s


def test_summary_round_trip_keeps_bytes_and_keys(tmp_path):
    text = (FIXTURE / "summary.json").read_text()
    s = RunSummary.from_json(FIXTURE / "summary.json")
    assert s.to_json() == text  # same keys, order, indent and values as the trainer wrote
    assert RunSummary.from_json(json.loads(s.to_json())) == s
    assert RunSummary.from_json(s.as_dict()) == s
    RunDir(tmp_path).write_summary(s)
    assert (tmp_path / "summary.json").read_text() == text


def test_summary_tolerates_old_and_unknown_keys():
    s = RunSummary.from_json({"status": "weird", "final_eval_loss": None, "from_the_future": [1, 2]})
    assert s.status == "weird" and s.run_status is None and not s.completed
    assert s.n_params is None and s.extra == {"from_the_future": [1, 2]}
    assert s.as_dict() == {"status": "weird", "final_eval_loss": None, "from_the_future": [1, 2]}
    nan = RunSummary.from_json({"status": "diverged"}).replace(final_train_loss=math.nan, note="x")
    assert nan.as_dict() == {"status": "diverged", "final_train_loss": None, "note": "x"}  # strict JSON
    assert json.loads(nan.to_json())["final_train_loss"] is None


def test_one_reader_skips_torn_lines_and_reads_null_as_nan():
    recs = read_metrics(FIXTURE / "metrics.jsonl")
    assert [r["step"] for r in recs] == FIXTURE_STEPS
    assert recs.skipped == 1  # the torn last line, counted, not fatal
    assert math.isnan(recs[1]["mfu"]) and recs[0]["mfu"] > 0
    assert recs[-1]["eval_loss"] == json.loads((FIXTURE / "summary.json").read_text())["final_eval_loss"]
    assert RunDir(FIXTURE).metrics() == recs
    assert read_metrics(FIXTURE / "missing.jsonl") == []


def test_corrupt_and_non_object_lines_are_counted(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_bytes(b'{"step": 1, "loss": 2.0}\n[1, 2]\n\n\xff\xfe\n"text"\n{"step": 2, "loss": null}\n{"st')
    recs = read_metrics(p)
    assert [r["step"] for r in recs] == [1, 2] and math.isnan(recs[1]["loss"])
    assert recs.skipped == 4
    assert "skipped 4 corrupt line(s)" in recs.skipped_message()


def test_analysis_load_reads_the_old_run(run_copy):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        runs_df, curves_df = runs.load(run_copy.parent, cache_dir=False)
    assert any("skipped 1 corrupt line" in str(x.message) for x in w)
    assert len(runs_df) == 1 and runs_df["status"].iloc[0] == RunStatus.COMPLETED
    row = runs_df.iloc[0]
    assert row["final_eval_loss"] == pytest.approx(2.531987428665161)
    assert row["model.d_model"] == 32 and row["train.tokens"] == 20000
    assert curves_df["step"].tolist() == FIXTURE_STEPS
    assert curves_df["mfu"].isna().tolist() == [False, True, False, False, False]
    with pytest.warns(runs.RunWarning, match="skipped 1 corrupt line"):
        frame = runs.metrics_frame(run_copy)
    assert frame["step"].tolist() == FIXTURE_STEPS


def test_statuses_of_unfinished_dirs(tmp_path):
    assert RunDir(tmp_path / "nope").status is ReadStatus.UNFINISHED
    assert read_status(tmp_path / "nope") == ReadStatus.NEW
    (tmp_path / "summary.json").write_text("[1]")
    assert RunDir(tmp_path).status is ReadStatus.CORRUPT_SUMMARY
    assert read_status(tmp_path) == ReadStatus.INTERRUPTED
    (tmp_path / "summary.json").write_text('{"n_params": 3}')
    assert RunDir(tmp_path).status is ReadStatus.UNKNOWN
    for status in RunStatus:
        (tmp_path / "summary.json").write_text(json.dumps({"status": status.value}))
        assert RunDir(tmp_path).status is status
        finished = status in (RunStatus.COMPLETED, RunStatus.DIVERGED, RunStatus.FAILED, RunStatus.STOPPED)
        assert read_status(tmp_path) == (status if finished else ReadStatus.INTERRUPTED)


def test_writer_appends_strict_lines_and_truncates_on_resume(run_copy):
    w = MetricsWriter(run_copy / "metrics.jsonl")
    w.truncate_after(3)  # resume from the checkpoint at step 3: the torn line goes too
    assert [r["step"] for r in read_metrics(w.path)] == [1, 2, 3]
    assert read_metrics(w.path).skipped == 0
    w.append({"step": 4, "loss": math.inf})
    w.close()
    assert (run_copy / "metrics.jsonl").read_text().splitlines()[-1] == '{"step": 4, "loss": null}'
    log = MetricsLog(run_copy / "metrics.jsonl")  # the trainer's log writes through the same writer
    log.truncate_after(2)
    log.write({"step": 3, "loss": 1.5})
    log.close()
    assert [r["step"] for r in read_metrics(w.path)] == [1, 2, 3]
    log.reset()
    assert not w.path.exists()


def test_run_dir_paths(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.summary_path == tmp_path / "summary.json" and rd.metrics_path == tmp_path / "metrics.jsonl"
    assert rd.hydra_config_path == tmp_path / ".hydra" / "config.yaml"
    assert rd.lock_path(1) == tmp_path / ".run.lock.1"
    assert rd.console_log_path("rl") == tmp_path / "rl.log"
    assert not rd.is_run() and RunDir(FIXTURE).is_run()
    assert [r.path for r in rundir.iter_run_dirs(FIXTURE.parent) if r.path.name == "rundir_v0"] == [FIXTURE]
    assert RunDir(FIXTURE).first_metrics_record()["step"] == 1


def test_a_built_summary_writes_every_field_it_was_given():
    s = RunSummary.of(status=None, n_params=None, tokens=3)
    assert s.as_dict() == {"status": None, "n_params": None, "tokens": 3}  # nulls kept, as the trainers wrote
    assert s.replace(status=RunStatus.FAILED).as_dict()["status"] == "failed"
    assert s.replace(status=RunStatus.FAILED).run_status is RunStatus.FAILED and s.status is None  # frozen
    with pytest.raises(TypeError):
        RunSummary.of(final_eval_los=1.0)  # a misspelt field is an error, not a new key
    assert set(rundir.ROLE_FIELDS.values()) | set(rundir.FINAL_NUMBERS) <= set(RunSummary.field_names())
    assert rundir.ROLE_FIELDS["loss"] == "final_eval_loss" and rundir.ROLE_FIELDS["N"] == "n_params"


def test_read_summary_is_none_for_a_missing_or_corrupt_file(tmp_path):
    assert RunDir(tmp_path).read_summary() is None
    (tmp_path / "summary.json").write_text("[1]")
    assert RunDir(tmp_path).read_summary() is None
    (tmp_path / "summary.json").write_text("{not json")
    assert RunDir(tmp_path).read_summary() is None and RunDir(tmp_path).status is ReadStatus.CORRUPT_SUMMARY


def test_one_walker_finds_runs_for_collect_and_the_rl_report(tmp_path):
    from analysis.rl.report import find_rl_runs

    for d in ("sweep/a", "sweep/b/nested", "sweep/.scalelab_cache/x", "sweep/rl"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "sweep/a/summary.json").write_text('{"status": "completed"}')
    (tmp_path / "sweep/b/nested/metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    (tmp_path / "sweep/.scalelab_cache/x/summary.json").write_text("{}")  # never a run
    (tmp_path / "sweep/rl/metrics.jsonl").write_text('{"step": 0, "flops_rl": 0, "pass_rate": 0.1}\n')
    walked = sorted(rd.path.relative_to(tmp_path).as_posix() for rd in rundir.iter_run_dirs(tmp_path))
    assert walked == ["sweep/a", "sweep/b/nested", "sweep/rl"]
    found = runs.find_run_dirs([tmp_path / "sweep", tmp_path / "sweep/a/summary.json"])  # a file: its run
    assert found == [(tmp_path / d).resolve() for d in ("sweep/a", "sweep/b/nested", "sweep/rl")]
    assert find_rl_runs(tmp_path / "sweep") == [tmp_path / "sweep/rl"]


def test_one_completed_run_check_with_the_fingerprint(tmp_path):
    """The trainer's and the RL loop's check (experiments.rundir.completed_summary): a completed
    run of the same fields is returned, of other fields refused; the fields are only computed
    when there is a completed run; a summary without config_fields falls back to the fingerprint."""
    from experiments.rundir import completed_summary
    from models.base.errors import ConfigError
    from models.base.fingerprint import fingerprint

    fields = {"model": {"d_model": 32}, "rl": {"seed": 0}}

    def never():
        raise AssertionError("fields computed without a completed run")

    assert completed_summary(tmp_path, never) is None  # no summary
    RunDir(tmp_path).write_summary(RunSummary.of(status=RunStatus.FAILED, config_fields=fields))
    assert completed_summary(tmp_path, never) is None  # not completed
    RunDir(tmp_path).write_summary(RunSummary.of(status=RunStatus.COMPLETED, config_fields=fields, steps=6))
    assert completed_summary(tmp_path, lambda: fields).steps == 6
    with pytest.raises(ConfigError, match=r"another config \(rl.seed: 0 -> 1\)"):
        completed_summary(tmp_path, lambda: {"model": {"d_model": 32}, "rl": {"seed": 1}})
    RunDir(tmp_path).write_summary(RunSummary.of(status="completed", config_fingerprint=fingerprint(fields)))
    assert completed_summary(tmp_path, lambda: fields).completed
    with pytest.raises(ConfigError, match="fingerprint differs"):
        completed_summary(tmp_path, lambda: {"rl": {"seed": 1}})

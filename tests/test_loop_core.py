"""The loop skeleton shared by the trainer and the RL loop (experiments/loop_core.py) and the
typed config checks (models/base/configs.py): fast, no JAX, no run."""

from __future__ import annotations

import pytest

from experiments.loop_core import Diverged, Hooks, StepState, preemption_check, run_steps
from models.base.configs import check_bool, check_choice, check_float, check_int, is_int, is_number
from models.base.errors import ConfigError
from models.base.rundir import RunStatus


class _Guard:
    """A preemption guard whose stop vote turns true at step `at` (1-based, counted per call)."""

    def __init__(self, at: int | None):
        self.at, self.calls = at, 0

    def should_stop(self) -> bool:
        self.calls += 1
        return self.at is not None and self.calls >= self.at

    def signal_names(self) -> list[str]:
        return ["SIGTERM"]


class _Body:
    def __init__(self, diverge_at: int | None = None):
        self.log: list[str] = []
        self.diverge_at = diverge_at

    def step(self, i: int) -> None:
        if i == self.diverge_at:
            raise Diverged(f"non-finite loss at step {i + 1}")
        self.log.append(f"step {i}")

    def drain(self) -> None:
        self.log.append("drain")

    def close(self) -> None:
        self.log.append("close")


def _run(start: int, total: int, guard: _Guard | None, body: _Body | None = None):
    body, hooks, lines = body or _Body(), Hooks(), []
    hooks.add_hook(lambda s: body.log.append(f"eval {s.done}"), every=2)
    hooks.add_hook(preemption_check(guard), every=1)
    hooks.add_hook(lambda s: body.log.append(f"ckpt {s.done}"), every=3, on_stop=True)
    status = run_steps(body, hooks, StepState(start=start, total=total), guard, lines.append)
    return status, body.log, lines


def test_hooks_run_on_their_cadence_in_order_and_after_the_last_step():
    status, log, lines = _run(0, 4, _Guard(None))
    assert status == RunStatus.COMPLETED and lines == []
    assert log == [
        "step 0",
        "step 1",
        "eval 2",
        "step 2",
        "ckpt 3",
        "step 3",
        "eval 4",
        "ckpt 4",  # at_end: the last step is checkpointed off its cadence
        "drain",
        "close",
    ]


def test_resumed_steps_keep_the_global_cadence():
    _, log, _ = _run(3, 5, _Guard(None))
    assert log == ["step 3", "eval 4", "step 4", "eval 5", "ckpt 5", "drain", "close"]


def test_preemption_checkpoints_the_step_then_stops():
    status, log, lines = _run(0, 10, _Guard(2))
    assert status == RunStatus.PREEMPTED
    assert log == ["step 0", "step 1", "eval 2", "ckpt 2", "close"]  # no drain: nothing runs on
    assert lines == ["preempted by SIGTERM: checkpoint at step 2 saved, stopping"]


def test_a_stop_vote_at_the_last_step_completes_the_run():
    status, log, _ = _run(0, 2, _Guard(2))
    assert status == RunStatus.COMPLETED and log[-3:] == ["ckpt 2", "drain", "close"]


def test_divergence_stops_the_run_and_says_why():
    status, log, lines = _run(0, 5, None, _Body(diverge_at=1))
    assert status == RunStatus.DIVERGED and log == ["step 0", "close"]
    assert lines == ["diverged: non-finite loss at step 2"]


def test_every_zero_means_only_at_the_end():
    hooks, seen = Hooks(), []
    hooks.add_hook(lambda s: seen.append(s.done), every=0)
    run_steps(_Body(), hooks, StepState(start=0, total=3), None, print)
    assert seen == [3]


# ---- typed config checks -------------------------------------------------------------------


def test_checks_refuse_booleans_and_name_the_key_and_range():
    assert is_int(3) and not is_int(True) and not is_int(3.0)
    assert is_number(0.5) and not is_number(False) and not is_number(float("nan"))
    with pytest.raises(ConfigError, match=r"^train.seed must be an integer >= 0 \(got True\)$"):
        check_int("train.seed", True, 0)
    with pytest.raises(ConfigError, match=r"^eval.shots must be an integer >= 0 and <= 64 \(got 65\)$"):
        check_int("eval.shots", 65, 0, 64)
    with pytest.raises(ConfigError, match=r"^model.d_ff must be a positive integer \(got 0\)$"):
        check_int("model.d_ff", 0, 1, what="a positive integer")
    with pytest.raises(ConfigError, match=r"^optim.lr must be a number > 0.0 \(got 0\)$"):
        check_float("optim.lr", 0, 0.0, lo_open=True)
    with pytest.raises(ConfigError, match=r"^rl.x must be a number >= 0.0 and <= 1.0 \(got nan\)$"):
        check_float("rl.x", float("nan"), 0.0, 1.0)
    with pytest.raises(ConfigError, match=r"^rl.algo.zero_variance_filter must be true or false$"):
        check_bool("rl.algo.zero_variance_filter", 1)
    assert (
        check_int("a", 5, 1, 5) == 5
        and check_float("b", 1, 0.0, 1.0) == 1
        and check_bool("c", False) is False
    )


def test_choices_take_an_enum_and_print_its_strings():
    from experiments.train.config import SCHEDULES, Schedule

    assert check_choice("optim.schedule", "wsd", Schedule) == Schedule.WSD
    with pytest.raises(ConfigError) as e:
        check_choice("optim.schedule", "step", Schedule)
    assert str(e.value) == f"optim.schedule must be one of {SCHEDULES} (got 'step')"
    assert SCHEDULES == ("cosine", "linear", "wsd", "constant")

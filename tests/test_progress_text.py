"""What the console says: an ETA from the steady-state rate, and plain final words."""

import io
import math

import pytest

from sebulba import run_outputs
from sebulba.runtime import progress
from sebulba.runtime.progress import ConsoleProgress, eta_seconds, progress_line


def test_the_eta_is_unknown_until_the_first_update_has_finished():
    assert eta_seconds(10_000, 0, None, now=5.0) == math.inf
    # Just after the first update: no steady-state step has been timed yet.
    assert eta_seconds(10_000, 1_000, (30.0, 1_000), now=30.0) == math.inf


def test_the_eta_counts_the_rate_after_the_first_update_not_the_compile():
    # Update 1 took 30 s (compiling) for 1,000 steps; the next 2,000 took 2 s. The rate
    # since the start (3,000 steps / 32 s) would say 75 s for the 7,000 left; the
    # steady-state rate (1,000 steps/s) says 7 s.
    assert eta_seconds(10_000, 3_000, (30.0, 1_000), now=32.0) == pytest.approx(7.0)
    assert eta_seconds(10_000, 10_000, None, now=40.0) == 0.0  # Done: nothing left.


def test_the_console_starts_its_clock_at_the_first_update(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    console = ConsoleProgress(10_000, 10, mode="lines", stream=io.StringIO())
    now[0] = 30.0
    console.on_update(1, 1_000)
    assert console.eta_s(1_000) == math.inf
    now[0] = 32.0
    console.on_update(2, 3_000)
    assert console.eta_s(3_000) == pytest.approx(7.0)


def test_updates_reported_together_give_no_eta_until_a_second_has_passed(monkeypatch):
    # An Anakin call of 4 updates reports them all at its end: from update 1's report
    # to update 4's no time passes, and a rate over it would promise the rest in 0 s.
    now = [30.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    console = ConsoleProgress(10_000, 10, mode="lines", stream=io.StringIO())
    for update in range(1, 5):
        now[0] += 0.001
        console.on_update(update, update * 1_000)
    assert console.eta_text(4_000) == "?"
    now[0] += 2.0  # The next call: 4 updates in 2 s.
    for update in range(5, 9):
        console.on_update(update, update * 1_000)
    assert console.eta_s(8_000) == pytest.approx(2.0 * 2_000 / 7_000, rel=1e-2)


def test_an_off_policy_eta_measures_the_learning_updates_not_the_random_actions(monkeypatch):
    # DQN with learning_starts 10,000: ten updates of 1,000 random-action steps take 0.1 s
    # each, then every learning update takes 1 s. A rate from update 1 would promise the
    # 88,000 steps left in about 32 s; they take 88.
    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    console = ConsoleProgress(
        100_000, 100, mode="lines", stream=io.StringIO(), learning_starts=10_000
    )
    for update in range(1, 11):
        if update == 9:
            assert console.eta_text(9_000) == "? (measured once learning starts at step 10,000)"
        now[0] += 0.1
        console.on_update(update, update * 1_000)
    for update in (11, 12):
        now[0] += 1.0
        console.on_update(update, update * 1_000)
    assert console.eta_s(12_000) == pytest.approx(88.0)
    assert console.eta_text(12_000) == "0:01:28"
    line = progress_line(_line(global_step=9_000), 100_000, 100, "? (learning starts)")
    assert " sps ETA ? (learning starts) return " in line


def test_an_agent_that_searches_shows_its_search_throughput():
    line = progress_line(_line(search_simulations_per_s=16_000.0), 10_000, 10, 5.0)
    assert line.endswith(" actors=25% search 16,000 sims/s per acting device")
    assert "search" not in progress_line(_line(), 10_000, 10, 5.0)


def _line(**changes):
    line = {
        "global_step": 3_000,
        "update": 3,
        "sps": 1_000.0,
        "episodic_return": None,
        "actor_policy_version": 2,
        "learner_policy_version": 4,
        "learner_wait_fraction": 0.5,
        "actor_wait_fraction": 0.25,
    }
    return {**line, **changes}


def test_progress_lines_show_the_eta_they_are_given():
    assert " ETA ? " in progress_line(_line(), 10_000, 10, math.inf)
    assert " ETA 0:00:07 " in progress_line(_line(), 10_000, 10, 7.0)


def _summary(episodes, mean_return, tasks=("CartPole-v1",)):
    return {
        "tasks": {task: {} for task in tasks},  # Every summary has one task at least.
        "global_step": 512,
        "wall_time_s": 9.0,
        "sps": 6_000.0,
        "sps_including_compile": 300.0,
        "episodes": episodes,
        "mean_return": mean_return,
        "bottleneck": {"limited_by": "learner", "detail": "d"},
    }


@pytest.mark.parametrize(
    "episodes, mean_return, tasks, words",
    [
        (0, None, 1, "no episode has finished, so there is no mean return"),
        (1, 12.0, 1, "mean return of the episode 12.0"),
        (21, 20.5, 1, "mean return of the last 21 episodes 20.5"),
        (350, 480.0, 1, "mean return of the last 100 episodes 480.0"),
        (350, 0.9615, 3, "mean return over tasks (each its last 100 episodes) 0.962"),
    ],
)
def test_the_final_line_reads_naturally_however_many_episodes_finished(
    episodes, mean_return, tasks, words
):
    summary = _summary(episodes, mean_return, tuple(f"task{i}" for i in range(tasks)))
    first = run_outputs.final_report(summary).splitlines()[0]
    assert first.endswith(f"including start-up), {words}")
    assert " -" not in first

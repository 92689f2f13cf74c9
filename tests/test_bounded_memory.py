"""Memory that must not grow with updates: what a multi-task run keeps between updates.

The resident-memory figures are measured by benchmarks/multitask_memory.py; these tests
check the properties behind them quickly and without timing or RSS thresholds.
"""

import collections
import itertools

import jax
import numpy as np

from sebulba import run_outputs, train
from sebulba.agents import ppo
from sebulba.runtime.metrics import MetricsLogger
from tests.helpers import agent_config

_TASKS = ("CartPole-v0", "CartPole-v1")
_WINDOW = 100  # Recent episodes behind summary.json's mean_return, overall and per task.


def retained_numbers(obj, seen=None) -> int:
    """Numbers held in `obj`: its containers and arrays, and sebulba objects' attributes."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return obj.size
    if isinstance(obj, dict):
        return sum(retained_numbers(v, seen) for v in obj.values())
    if isinstance(obj, list | tuple | collections.deque | set):
        return sum(retained_numbers(v, seen) for v in obj)
    if type(obj).__module__.startswith("sebulba.") and hasattr(obj, "__dict__"):
        return retained_numbers(vars(obj), seen)  # e.g. the per-task episode windows.
    return int(isinstance(obj, int | float))


class _RecordingLogger(MetricsLogger):
    """The run's MetricsLogger, kept where the test can look at it."""

    instances: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _RecordingLogger.instances.append(self)


def test_multitask_run_keeps_bounded_episode_state_and_compiles_nothing_after_warmup(
    tmp_path, monkeypatch
):
    """Episode windows stay bounded and no update after the third traces or compiles.

    The metrics keep at most the last 100 episodes (overall and per task) plus the
    episodes of the current log window, however many episodes the run finishes; a list
    that kept every episode would exceed that bound several times over. A trace or
    compile in a late update would grow JAX's caches with every update.
    """
    # A near-zero step size keeps CartPole's episodes short (~20 steps): many episodes.
    config = agent_config(
        ppo,
        env__ids=_TASKS,
        env__num_envs=16,
        agent__num_steps=16,
        agent__learning_rate=1e-9,
        agent__minibatch_loop="scan",
        ckpt__every_updates=0,  # Saves trace once; the run saves only at its end.
    )
    num_updates = 200
    config.total_timesteps = 16 * 16 * num_updates
    monkeypatch.setattr(_RecordingLogger, "instances", [])
    monkeypatch.setattr(run_outputs, "MetricsLogger", _RecordingLogger)
    traces = collections.Counter()

    def count(event: str, duration: float, **kwargs) -> None:
        del duration, kwargs
        if event.startswith("/jax/core/compile/"):
            traces[event] += 1

    per_update = []  # (update, numbers retained by the metrics, episodes of the update)
    traces_at = {}  # update -> trace/compile event counts after it

    def on_update(report, state) -> None:
        del state
        (logger,) = _RecordingLogger.instances
        per_update.append(
            (report.update, retained_numbers(vars(logger)), len(report.episode_returns))
        )
        if report.update in (3, num_updates - 1):
            traces_at[report.update] = dict(traces)

    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        train.train(config, str(tmp_path), on_update=on_update)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)

    (logger,) = _RecordingLogger.instances
    assert len(per_update) == num_updates
    # No update after the third traced, lowered or compiled anything (up to the last
    # update, whose checkpoint is the run's only save).
    assert traces_at[3], "no trace events recorded: the listener is not called"
    assert traces_at[num_updates - 1] == traces_at[3]
    episodes = logger.episodes_finished
    most_per_update = max(n for _, _, n in per_update)
    # Returns and lengths of the last 100 episodes overall and per task, of one log
    # window (every update here) overall and per task, and some scalars (sizes, timers).
    bound = 2 * _WINDOW * (1 + len(_TASKS)) + 4 * most_per_update + 100
    assert episodes > 2 * bound, (episodes, bound)  # Keeping every episode would show.
    retained = max(n for _, n, _ in itertools.islice(per_update, num_updates // 2, None))
    assert retained <= bound, (retained, bound, episodes)

"""Episode statistics per task: what a joint multi-task run reports for each of its tasks.

Every finished episode reaches the metrics with the global index of the env it ran in;
`sebulba.environments.tasks.TaskLayout.task_of_env` names its task, so attribution depends on the
fixed env-to-task blocks alone, never on threads, processes or timing. Per task this
keeps the episodes of the current log window (the `episodic_return/<task id>` and
`episodic_length/<task id>` of a metrics line), the last `RECENT_EPISODES` returns and
lengths (summary.json's `tasks`; bounded whatever the run's length) and the episode
count. The recent windows and counts are checkpoint metadata, so a resumed run
continues them.

For a set of Atari tasks the aggregate is the median and mean human-normalised score
over the tasks, the summary statistic of multi-task Atari-57 agents (Espeholt et al.
2018, "IMPALA"; Hessel et al. 2019, "Multi-task deep RL with PopArt").
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sebulba.environments.envpool_registry import is_atari
from sebulba.environments.tasks import TaskLayout

# Upward (environments -> experiments): the published Atari reference scores are a table
# there, shared with the plots; atari_scores imports nothing of sebulba.
from sebulba.experiments.atari_scores import human_normalized_score

RECENT_EPISODES = 100  # Episodes per task behind summary.json's per-task means.


def _mean_or_none(values) -> float | None:
    return float(np.mean(values)) if len(values) else None


class TaskEpisodes:
    """Each task's episodes: the log window's, the last `RECENT_EPISODES`, and a count.

    Args:
      layout: the run's tasks and their env blocks.
      saved: `state()` of the run this one resumes (checkpoint metadata), or None.
    """

    def __init__(self, layout: TaskLayout, saved: Mapping[str, Any] | None = None):
        self.layout = layout
        saved = saved or {}
        self.recent_returns: dict[str, collections.deque[float]] = {}
        self.recent_lengths: dict[str, collections.deque[int]] = {}
        self.episodes: dict[str, int] = {}
        for task_id in layout.ids:
            task = saved.get(task_id, {})
            self.recent_returns[task_id] = collections.deque(
                task.get("recent_returns", ()), maxlen=RECENT_EPISODES
            )
            self.recent_lengths[task_id] = collections.deque(
                task.get("recent_lengths", ()), maxlen=RECENT_EPISODES
            )
            self.episodes[task_id] = int(task.get("episodes", 0))
        self._clear_window()
        # Atari-57 aggregates mean something only over several Atari tasks.
        self.reports_atari_scores = layout.is_multitask and all(map(is_atari, layout.ids))

    def _clear_window(self) -> None:
        self._window_returns: dict[str, list[float]] = {i: [] for i in self.layout.ids}
        self._window_lengths: dict[str, list[int]] = {i: [] for i in self.layout.ids}

    def record(
        self, returns: Sequence[float], lengths: Sequence[int], env_ids: Sequence[int]
    ) -> None:
        """Adds finished episodes: raw returns, lengths and global env indices [n]."""
        if not len(returns) == len(lengths) == len(env_ids):
            raise ValueError(
                f"{len(returns)} returns, {len(lengths)} lengths, {len(env_ids)} env indices"
            )
        tasks = self.layout.task_of_env(np.asarray(env_ids, np.int64))
        for episode_return, length, task in zip(returns, lengths, tasks, strict=True):
            task_id = self.layout.ids[task]
            self.recent_returns[task_id].append(float(episode_return))
            self.recent_lengths[task_id].append(int(length))
            self.episodes[task_id] += 1
            self._window_returns[task_id].append(float(episode_return))
            self._window_lengths[task_id].append(int(length))

    def window_metrics(self) -> dict[str, float | None]:
        """A metrics line's per-task fields (multi-task runs only); starts a new window.

        `episodic_return/<id>` and `episodic_length/<id>`: means over the window's
        episodes of that task (None if none ended); for Atari task sets also
        `atari_median_hns` and `atari_mean_hns` over each task's recent returns.
        """
        line: dict[str, float | None] = {}
        if self.layout.is_multitask:
            for task_id in self.layout.ids:
                line[f"episodic_return/{task_id}"] = _mean_or_none(self._window_returns[task_id])
            for task_id in self.layout.ids:
                line[f"episodic_length/{task_id}"] = _mean_or_none(self._window_lengths[task_id])
            line.update(self.atari_scores())
        self._clear_window()
        return line

    def atari_scores(self) -> dict[str, float | None]:
        """Median and mean human-normalised score over the tasks with a return so far.

        Each task scores the mean of its recent returns; tasks outside the Atari-57
        reference table have no score. Empty unless every task is Atari and K > 1.
        """
        if not self.reports_atari_scores:
            return {}
        scores = []
        for task_id in self.layout.ids:
            mean_return = _mean_or_none(self.recent_returns[task_id])
            score = None if mean_return is None else human_normalized_score(task_id, mean_return)
            if score is not None:
                scores.append(score)
        return {
            "atari_median_hns": float(np.median(scores)) if scores else None,
            "atari_mean_hns": _mean_or_none(scores),
        }

    def mean_recent_return(self) -> float | None:
        """summary.json's `mean_return`: the mean over tasks of each task's recent mean.

        Each task with a finished episode weighs the same, whatever its share of envs or
        its episode length (a joint run's window of its last 100 episodes overall would
        hold mostly the tasks whose episodes are short or whose envs come last); with one
        task it is the mean of the run's last `RECENT_EPISODES` episodes. None before the
        first episode.
        """
        means = [_mean_or_none(r) for r in self.recent_returns.values() if len(r)]
        return float(np.mean(means)) if means else None

    def summary(self) -> dict[str, Any]:
        """summary.json's per-task fields: `tasks`, `env_ids` and the Atari aggregates."""
        tasks = {
            task_id: {
                "mean_return": _mean_or_none(self.recent_returns[task_id]),
                "mean_length": _mean_or_none(self.recent_lengths[task_id]),
                "episodes": self.episodes[task_id],
            }
            for task_id in self.layout.ids
        }
        return {"tasks": tasks, "env_ids": list(self.layout.ids), **self.atari_scores()}

    def state(self) -> dict[str, Any]:
        """JSON for checkpoint metadata: each task's recent episodes and count."""
        return {
            task_id: {
                "recent_returns": list(self.recent_returns[task_id]),
                "recent_lengths": list(self.recent_lengths[task_id]),
                "episodes": self.episodes[task_id],
            }
            for task_id in self.layout.ids
        }

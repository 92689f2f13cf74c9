"""Episode bookkeeping of an envpool pool's steps, on the host.

`EpisodeTracker` sums each env's raw return and length and marks the steps that are
envpool's auto-resets (the step after an episode ended, whose action envpool ignores) as
invalid; `game_overs` says which terminations end a scored episode (Atari's
`episodic_life`); `learning_rewards` clips rewards to their sign for Atari while the raw
returns are reported.
"""

from __future__ import annotations

import numpy as np


def learning_rewards(raw_rewards: np.ndarray, clip: bool) -> np.ndarray:
    """Rewards the agent learns from: clipped to {-1, 0, 1} for Atari (Mnih et al. 2015)."""
    rewards = raw_rewards.astype(np.float32)
    return np.sign(rewards) if clip else rewards


class EpisodeTracker:
    """Raw episodic returns of one pool, and which steps are envpool's auto-resets.

    envpool resets an env on the step after its episode ended and ignores that step's
    action; such steps are marked invalid so no agent learns from them. Every finished
    episode is reported with the global index of its env, so the metrics can attribute
    it to its task (`sebulba.environments.tasks.TaskLayout.task_of_env`) without the
    pipeline knowing about tasks.

    Args:
      env_ids: [n] global env indices of the pool's envs, in pool order.
    """

    def __init__(self, env_ids):
        self.env_ids = np.asarray(env_ids, np.int64)
        num_envs = len(self.env_ids)
        self.returns = np.zeros(num_envs, np.float64)
        self.lengths = np.zeros(num_envs, np.int64)
        # True where the previous step ended an episode, so this step is envpool's reset.
        self.resetting = np.zeros(num_envs, bool)

    def step(
        self,
        raw_rewards,
        terminations,
        truncations,
        finished_returns: list[float],
        finished_lengths: list[int],
        finished_env_ids: list[int],
        game_overs=None,
    ):
        """Records one env step; returns the step's validity mask [num_envs].

        The episodes that ended on this step are appended, in env order, to the three
        lists: raw return, length in agent steps and global env index. `game_overs`
        (`game_overs()`; default: the terminations) says which terminations end the
        scored episode: with Atari's `episodic_life` a lost life terminates and resets
        the env, but the game, its return and its length go on.
        """
        valid = ~self.resetting
        self.returns += np.where(valid, raw_rewards, 0.0)
        self.lengths += valid
        done = np.logical_or(terminations, truncations)
        ended = done if game_overs is None else np.logical_or(game_overs, truncations)
        finished_returns.extend(self.returns[ended].tolist())
        finished_lengths.extend(self.lengths[ended].tolist())
        finished_env_ids.extend(self.env_ids[ended].tolist())
        self.returns[ended] = 0.0
        self.lengths[ended] = 0
        self.resetting = done
        return valid


def game_overs(terminations, info):
    """[n] bool: the terminations that end a scored episode, from a step's `info`.

    envpool's Atari flags the game's end in `info["terminated"]`, which differs from the
    termination only with `episodic_life` (every lost life terminates); the other tasks
    have no such flag and every termination ends the episode. NumPy or JAX arrays.
    """
    flags = info.get("terminated") if isinstance(info, dict) else None
    return terminations if flags is None else flags.astype(bool)

"""Random streams: init, actor sampling, learner, inference and JAX envs never share a key.

The keys are taken from the code paths that use them (the pipeline's policy step, the
agents' minibatch permutations, a loaded policy in evaluation, training's init, the Anakin
runner's and evaluation's JAX env steps), not recomputed.
"""

import types

import jax
import numpy as np
from jax.sharding import NamedSharding

from sebulba import evaluate, random_streams, run_setup, train
from sebulba.actors.actor_step import actor_step
from sebulba.agents import impala, minibatches, ppo
from sebulba.agents.api import Agent, ArraySpec, Discrete, EnvSpec
from sebulba.anakin import episodes as anakin_episodes
from sebulba.anakin.env_api import JaxEnv
from sebulba.anakin.runner import AnakinRunner
from sebulba.config import base_config
from sebulba.policy import Policy
from tests import test_impala, test_ppo

SEED = 1
STEPS, ENVS, UPDATES = 12, 8, 4  # Small ranges of every counter.


def _rows(key_data) -> set[bytes]:
    """Raw key data [..., 2] uint32 -> one bytes object per key."""
    data = np.asarray(key_data).reshape(-1, np.asarray(key_data).shape[-1])
    return {row.tobytes() for row in data}


def _key_data(keys):
    return jax.random.key_data(keys)


def init_keys(seed):
    """The key `train.init_learner_state` hands to `agent.init`."""
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("batch",))
    agent = Agent(init=_key_data, act=None, update=None, policy_params=None)
    setup = types.SimpleNamespace(
        config=types.SimpleNamespace(seed=seed),
        agent=agent,
        layout=types.SimpleNamespace(sharding=lambda spec: NamedSharding(mesh, spec)),
        learner_state_shapes=run_setup.state_shapes(agent, seed),
    )
    return _rows(train.init_learner_state(setup))


def actor_keys(seed):
    """Keys the pipeline's policy step hands to `agent.act`, over steps and envs."""
    agent = Agent(
        init=None,
        act=lambda params, obs, keys: (_key_data(keys), {}),
        update=None,
        policy_params=None,
    )
    env_ids = np.arange(ENVS, dtype=np.int32)
    starts = np.zeros(ENVS, bool)
    rows = set()
    for step in range(STEPS):
        _, _, keys, _, _ = actor_step(agent, seed, None, (), None, starts, env_ids, np.int32(step))
        rows |= _rows(keys)
    return rows


def learner_keys(agent_module, make_agent, rollout, monkeypatch):
    """Per-env (or per-group) permutation keys of the agent's update over update counts."""
    recorded = []
    original = minibatches._per_env_keys

    def recording(key, ids):
        keys = original(key, ids)
        jax.debug.callback(lambda data: recorded.append(np.asarray(data)), _key_data(keys))
        return keys

    monkeypatch.setattr(minibatches, "_per_env_keys", recording)
    agent = make_agent()
    update = jax.jit(agent.update)
    state = agent.init(random_streams.init_key(0))
    for count in range(UPDATES):
        jax.block_until_ready(update(state.replace(update_count=np.int32(count)), rollout))
    assert recorded, f"{agent_module.__name__} drew no learner keys"
    rows = set().union(*(_rows(r) for r in recorded))
    assert len(rows) == sum(r.shape[0] for r in recorded)  # No repeats within the stream.
    return rows


def cartpole_policy(seed=0, act=None):
    """A loaded-policy stand-in on CartPole whose `act` (always action 0 by default) is
    given: evaluation plays it without a checkpoint."""

    def push_left(params, obs, keys):
        del params, keys
        return jax.numpy.zeros(obs.shape[0], jax.numpy.int32), {}

    return Policy(
        config=base_config(ppo.get_config()),
        env_spec=EnvSpec("CartPole-v1", ArraySpec((4,), "float32"), Discrete(2)),
        agent=Agent(init=None, act=act or push_left, update=None, policy_params=None),
        params=None,
        restored=types.SimpleNamespace(step=1, path="", meta={}),
        greedy=False,
        seed=seed,
        device=jax.devices()[0],
    )


def inference_keys(seed):
    """Keys a loaded policy hands to `act` while evaluation plays (CartPole)."""
    recorded = []

    def act(params, obs, keys):
        jax.debug.callback(lambda data: recorded.append(np.asarray(data)), _key_data(keys))
        return jax.numpy.zeros(obs.shape[0], jax.numpy.int32), {}

    evaluate.run_episodes(cartpole_policy(seed, act), episodes=4, seed=seed, num_envs=4)
    return set().union(*(_rows(r) for r in recorded))


def recording_jax_env(recorded) -> JaxEnv:
    """A JAX env recording the key of every reset and step; episodes last 3 steps."""

    def record(key):
        jax.debug.callback(lambda data: recorded.append(np.asarray(data)), _key_data(key))

    def reset(key):
        record(key)
        return jax.numpy.int32(0), jax.numpy.zeros(4)

    def step(state, action, key):
        record(key)
        return state + 1, jax.numpy.zeros(4), jax.numpy.float32(1), state >= 2, False

    spec = EnvSpec("test:Recording", ArraySpec((4,), "float32"), Discrete(2))
    return JaxEnv(spec=spec, reset=reset, step=step)


def zero_act(params, obs, keys):
    return jax.numpy.zeros(obs.shape[0], jax.numpy.int32), {}


def jax_env_keys(seed):
    """Keys the Anakin runner hands a JAX env's resets and steps while it trains."""
    recorded = []
    env = recording_jax_env(recorded)
    runner = AnakinRunner(
        Agent(init=None, act=zero_act, update=None, policy_params=None),
        None,  # No mesh: the rollout is collected without shardings.
        types.SimpleNamespace(num_envs=ENVS, num_steps=STEPS),
        env,
        env.spec,
        seed=seed,
        policy_lag=0,
        clip_rewards=False,
    )
    acting = runner._initial_acting(None)
    collect = jax.jit(runner.collect)  # One trace for every update.
    for update in range(1, UPDATES + 1):
        acting, _, _ = collect(None, acting, np.int32(update))
    jax.effects_barrier()  # Every recording callback has run.
    return set().union(*(_rows(r) for r in recorded))


def evaluation_env_keys(seed):
    """Keys evaluation hands a JAX env's resets and steps (`sebulba.anakin.episodes`)."""
    recorded = []
    env = recording_jax_env(recorded)
    policy = Policy(
        config=base_config(ppo.get_config()),
        env_spec=env.spec,
        agent=Agent(init=None, act=zero_act, update=None, policy_params=None),
        params=None,
        restored=types.SimpleNamespace(step=1, path="", meta={}),
        greedy=False,
        seed=seed,
        device=jax.devices()[0],
        jax_env=env,
    )
    anakin_episodes.play_episodes(policy, episodes=ENVS, seed=seed, batch_size=ENVS)
    jax.effects_barrier()
    return set().union(*(_rows(r) for r in recorded))


def population_keys(seed, monkeypatch):
    """Keys a population draws: its initial values and UPDATES exploit/explore steps."""
    from sebulba.pbt.population import Population
    from sebulba.pbt.settings import PopulationSettings

    recorded = []
    original = random_streams.population_key

    def recording(*args):
        key = original(*args)
        recorded.append(np.asarray(_key_data(key))[None])
        return key

    monkeypatch.setattr(random_streams, "population_key", recording)
    settings = PopulationSettings(
        population=ENVS,
        names=("learning_rate",),
        base=(1e-3,),
        low=(1e-4,),
        high=(1e-2,),
        interval_updates=1,
        replaced=ENVS // 2,
        perturb=1.25,
        resample_probability=0.25,
    )
    members = Population(settings, seed)
    for update in range(1, UPDATES + 1):
        for member in range(ENVS):
            members.record(member, [float(member)])
        members.step(update, update)
    rows = set().union(*(_rows(r) for r in recorded))
    assert len(rows) == len(recorded)  # No repeats within the stream.
    return rows


def test_no_two_streams_ever_share_a_key(monkeypatch):
    streams = {
        "init": init_keys(SEED),
        "actor": actor_keys(SEED),
        "ppo learner": learner_keys(
            ppo, test_ppo.make_agent, test_ppo.random_rollout(num_envs=ENVS), monkeypatch
        ),
        "impala learner": learner_keys(
            impala, test_impala.make_agent, test_impala.random_rollout(num_envs=ENVS), monkeypatch
        ),
        "inference": inference_keys(SEED),  # An evaluation may use the training seed.
        "jax env": jax_env_keys(SEED),
        "evaluation env": evaluation_env_keys(SEED),
        "population": population_keys(SEED, monkeypatch),
    }
    # Anakin: the first reset and T steps of every update, one key per env.
    assert len(streams["jax env"]) == (1 + UPDATES * STEPS) * ENVS
    # Evaluation: the reset and 3 steps of every episode (each env's first episode).
    assert len(streams["evaluation env"]) == 4 * ENVS
    assert len(streams["actor"]) == STEPS * ENVS
    # The initial draws of members 1.. and each step's draws for the replaced half.
    assert len(streams["population"]) == ENVS - 1 + UPDATES * ENVS // 2
    names = list(streams)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = streams[a] & streams[b]
            # Before the streams had tags of their own, PPO's shuffle key of (update 1,
            # epoch e, env g) was the actors' sampling key of (step e, env g).
            assert not shared, f"{a} and {b} share {len(shared)} keys"

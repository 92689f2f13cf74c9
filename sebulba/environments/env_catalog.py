"""The tasks `env.id` accepts, listed on the command line.

    python -m sebulba.environments.env_catalog              # each family and its task count
    python -m sebulba.environments.env_catalog mujoco       # a family's task ids and spaces
    python -m sebulba.environments.env_catalog gymnax       # a JAX suite's `SUITE:TASK` ids
    python -m sebulba.environments.env_catalog envpool.pgx  # envpool's pgx (`pgx`: JAX suite)

The list is envpool's registry, restricted to the families that
`sebulba.environments.envpool_registry` supports; the spaces are envpool's under the
settings a run uses (Atari's under the Machado et al. protocol: 18 actions, a stack of 4
grey 84x84 frames; ViZDoom's combined actions), read from envpool's specs without creating
envs. A task no run can train (a two-player game, ...) is listed with the reason it is
refused. Observation bounds are left out (envpool's are unreliable); the host turns
float64 observations into float32 (`sebulba.environments.spaces`).
The JAX-native suites that Anakin runs (`sebulba.anakin.suites`) follow, with the number
of tasks of each installed suite; a suite's listing builds each task's spec from its
adapter.
"""

from __future__ import annotations

import difflib
import re
import sys

# Upward (environments -> the Anakin runner's package): the catalog lists the JAX suites'
# tasks beside envpool's; suites imports nothing of this module.
from sebulba.anakin import suites
from sebulba.environments import envpool_pools, envpool_registry, task_checks
from sebulba.errors import ConfigError


def _normalised(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def family_named(text: str) -> str | None:
    """The supported family `text` names, e.g. "mujoco", "Box2D", "babyai", "classic".

    A family answers to its name, each part of it ("BabyAI", "Football") and its envpool
    module ("gfootball", "playground", "dmc", or whole: "envpool.pgx", which names the
    envpool family where a JAX suite has the short name), or the start of any of them.
    """
    wanted = _normalised(text)
    for module, family in envpool_registry.SUPPORTED_FAMILIES.items():
        names = [family, *family.replace("/", " ").split(), module.split(".")[-1], module]
        if wanted and any(_normalised(name).startswith(wanted) for name in names):
            return family
    return None


def tasks_by_family() -> dict[str, list[str]]:
    """Family name -> its task ids in envpool's registry order (families in README order)."""
    by_family = {family: [] for family in envpool_registry.SUPPORTED_FAMILIES.values()}
    for env_id in envpool_registry.supported_env_ids():
        by_family[envpool_registry.family_name(env_id)].append(env_id)
    return by_family


def describe_space(space, bounds: bool = False) -> str:
    """A gymnasium space in a few words: "Discrete(2)", "Box (4,) float32 in [-1, 1]".

    Args:
      bounds: give a Box's bounds (actions; observation bounds are unreliable).
    """
    kind = type(space).__name__
    if kind == "Discrete":
        return f"Discrete({space.n})"
    if kind == "MultiDiscrete":
        return f"MultiDiscrete({list(space.nvec)})"
    if kind == "Dict":
        entries = ", ".join(f"{k}: {describe_space(v)}" for k, v in space.spaces.items())
        return f"dict({entries})"
    if kind == "Box":
        text = f"Box {tuple(space.shape)} {space.dtype}"
        low, high = space.low.min(), space.high.max()
        if bounds:
            text += f" in [{low:g}, {high:g}]"
        return text
    return str(space)


def task_line(env_id: str) -> str:
    """A task id with its spaces as a run sees them, or why no run can train it."""
    try:
        task_checks.check_env_id(env_id)
        observation, action = envpool_pools.task_spaces(env_id)
    except ConfigError as error:
        return f"{env_id}: refused: {str(error).removeprefix(f'env.id {env_id!r} ')}"
    action = describe_space(action, bounds=True)
    return f"{env_id}: observation {describe_space(observation)}; action {action}"


def main(argv: list[str]) -> int:
    """Prints the families (no argument) or one family's tasks; returns the exit status."""
    try:
        return _print_tasks(argv)
    except BrokenPipeError:  # `... env_catalog atari | head`: the reader left.
        sys.stdout = None
        return 0


def _print_tasks(argv: list[str]) -> int:
    by_family = tasks_by_family()
    if not argv:
        total = sum(map(len, by_family.values()))
        print(f"env.id accepts {total} envpool tasks in {len(by_family)} families:")
        width = max(map(len, by_family))
        for family, ids in by_family.items():
            print(f"  {family:<{width}}  {len(ids):>4}  e.g. {', '.join(ids[:3])}")
        print(
            "List a family's tasks with their spaces: "
            "python -m sebulba.environments.env_catalog FAMILY"
        )
        _print_suites()
        return 0
    if len(argv) == 1 and argv[0] in suites.SUITES:
        return _print_suite(argv[0])
    family = family_named(argv[0]) if len(argv) == 1 else None
    if family is None:
        names = ", ".join(repr(f) for f in [*by_family, *suites.SUITES])
        close = difflib.get_close_matches(argv[0], [*by_family, *suites.SUITES], n=1)
        hint = f" (did you mean {close[0]!r}?)" if len(argv) == 1 and close else ""
        print(
            "sebulba.environments.env_catalog: usage: "
            "python -m sebulba.environments.env_catalog [FAMILY or JAX SUITE], one of "
            f"{names}{hint}",
            file=sys.stderr,
        )
        return 2
    print(f"{family}: {len(by_family[family])} tasks")
    for env_id in by_family[family]:
        print(f"  {task_line(env_id)}")
    return 0


def _print_suites() -> None:
    print(f"JAX envs (Anakin), env.id SUITE:TASK; {suites.INSTALL_HINT} installs the suites:")
    width = max(map(len, suites.SUITES))
    for suite in suites.SUITES:
        try:
            ids = suites.task_ids(suite)
        except ConfigError:
            print(f"  {suite:<{width}}  not installed")
            continue
        examples = ", ".join(f"{suite}:{task}" for task in ids[:2])
        print(f"  {suite:<{width}}  {len(ids):>4}  e.g. {examples}")
    print(
        "List a suite's tasks with their spaces: python -m sebulba.environments.env_catalog SUITE"
    )


def jax_task_line(env_id: str) -> str:
    """A JAX env's id with its spaces as a run sees them, or why it is refused."""
    from sebulba.agents.networks import describe_observation
    from sebulba.environments.tasks import describe_action

    try:
        spec = suites.make_env(env_id).spec
    except ConfigError as error:
        return f"{env_id}: refused: {error}"
    observation = describe_observation(spec.observation)
    return f"{env_id}: observation {observation}; action {describe_action(spec.action)}"


def _print_suite(suite: str) -> int:
    try:
        ids = suites.task_ids(suite)
    except ConfigError as error:
        print(f"sebulba.environments.env_catalog: {error}", file=sys.stderr)
        return 2
    print(f"{suite}: {len(ids)} tasks")
    for task in ids:
        print(f"  {jax_task_line(f'{suite}{suites.SEPARATOR}{task}')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

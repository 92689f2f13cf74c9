"""The fused step's overlap is in the program: every update piece's matrix work is
scheduled between its env step's send and recv, by XLA:CPU and by XLA:GPU compiling for
an H100 on this GPU-less machine (`sebulba.preflight.gpu_targets`), because the order is
data (`scan_actor.ordered_after`), not the position of a compiler pass.

Each case trains a tiny fused run for 3 updates on the CPU, keeps the fused program as it
was lowered (with its op names) and as XLA:CPU compiled it, compiles the same module for
the GPU, and reads both schedules (`sebulba.preflight.schedule`). They compile with XLA's
defaults, as users' runs do (the suite's fast-compile flags schedule differently).
"""

import re

import jax
import pytest

from sebulba import program_order, train
from sebulba.actors import scan_actor
from sebulba.agents import impala, ppo, pqn
from sebulba.preflight import gpu_targets, schedule
from tests.helpers import agent_config

GPU_MISSING = gpu_targets.plugin_missing_reason()
# 8 envs x 8 steps; PPO: 1 epoch of 2 minibatches in 2 micro-batches (4 pieces, 2 env
# steps a slot); IMPALA: 1 optimizer step of 2 micro-batches; PQN: 2 steps of 2.
CASES = {
    "ppo-scan": (ppo, dict(agent__minibatch_loop="scan", agent__update_epochs=1,
                           agent__num_minibatches=2, agent__gradient_accumulation_steps=2)),
    "ppo-unrolled": (ppo, dict(agent__minibatch_loop="unrolled", agent__update_epochs=1,
                               agent__num_minibatches=2, agent__gradient_accumulation_steps=2)),
    "impala": (impala, dict(agent__gradient_accumulation_steps=2)),
    "pqn": (pqn, dict(agent__update_epochs=1, agent__num_minibatches=2,
                      agent__gradient_accumulation_steps=2)),
}  # fmt: skip


def fused_program(tmp_path, monkeypatch, agent, overrides) -> tuple[str, str]:
    """(the fused program's StableHLO with op names, XLA:CPU's scheduled module of it)."""
    found = {}
    compile_lowered = jax.stages.Lowered.compile

    def keep(lowered, *args, **kwargs):
        compiled = compile_lowered(lowered, *args, **kwargs)
        text = lowered.as_text(debug_info=True)
        if re.search(r"module @jit_fused\b", text):
            found["stablehlo"], found["cpu"] = text, compiled.as_text()
        return compiled

    monkeypatch.setattr(jax.stages.Lowered, "compile", keep)
    config = agent_config(agent, agent__num_steps=8, total_timesteps=8 * 8 * 3, **overrides)
    config.env.num_envs = 8
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (0,)
    config.pipeline.actor_loop = "scan"
    config.pipeline.fused = "on"
    config.log.tensorboard = False
    train.train(config, str(tmp_path))
    monkeypatch.undo()
    return found["stablehlo"], found["cpu"]


def assert_pieces_in_windows(hlo_text: str, where: str) -> None:
    placed = schedule.piece_placement(hlo_text, scan_actor.UPDATE_PIECE_SCOPE)
    order = schedule.order_summary(hlo_text, scan_actor.UPDATE_PIECE_SCOPE)
    assert placed.windows >= 1 and placed.inside, (where, placed, order)
    assert not placed.matrix_outside, (where, placed.matrix_outside, order)
    # Outside the windows only small work may remain: XLA:CPU writes a step's scalar
    # stats into their buffer after the receive (it computed them for the ordering
    # reduction too), XLA:GPU hoists the unrolled loop's transposes and gathers of the
    # whole batch before the first window, a piece of the plan's preparation.
    assert placed.outside_bytes <= placed.inside_bytes / 10, (where, placed, order)


@pytest.mark.xla_default_compilation
@pytest.mark.parametrize("case", list(CASES))
def test_every_piece_runs_while_the_envs_step_on_cpu_and_on_an_h100(case, tmp_path, monkeypatch):
    agent, overrides = CASES[case]
    stablehlo, cpu = fused_program(tmp_path, monkeypatch, agent, overrides)
    assert_pieces_in_windows(cpu, "XLA:CPU")
    if GPU_MISSING:
        pytest.skip(f"the GPU half: {GPU_MISSING}")
    (device,) = gpu_targets.topology_devices("h100", hosts=1, gpus_per_host=1)
    executable = gpu_targets.compile_stablehlo(stablehlo, [device])
    gpu = executable.hlo_modules()[0].to_string()
    assert "is_scheduled=true" in gpu
    assert_pieces_in_windows(gpu, "XLA:GPU (H100)")


@pytest.mark.xla_default_compilation
def test_without_the_data_dependence_xla_cpu_schedules_the_pieces_outside_the_windows(
    tmp_path, monkeypatch
):
    # The optimisation barriers alone: XLA:CPU removes them before it schedules.
    monkeypatch.setattr(program_order, "after", lambda flag, tree: tree)
    agent, overrides = CASES["ppo-unrolled"]
    with monkeypatch.context() as inner:
        _, cpu = fused_program(tmp_path, inner, agent, overrides)
    placed = schedule.piece_placement(cpu, scan_actor.UPDATE_PIECE_SCOPE)
    assert placed.matrix_outside, schedule.order_summary(cpu)

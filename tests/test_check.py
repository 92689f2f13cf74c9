"""`python -m sebulba.check`: a run compiled for a slice that is not attached.

The TPU test compiles for a v5e slice through libtpu (a test dependency); the rest use
the GPU proxy (virtual CPU devices, the 8 of conftest; `gpu_proxy=True` where JAX's CUDA
plugin would compile for the GPUs themselves: tests/test_gpu_check.py) and HLO of known
shape.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from sebulba import check
from sebulba.errors import ConfigError
from sebulba.preflight import accelerators, check_report, hlo_cost
from tests.helpers import load_config, process_env, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS, BATCH, WIDTH = 8, 64, 256
# One SGD step of the scan below: the forward product and the weight gradient's product.
FLOPS_PER_STEP = 2 * (2 * BATCH * WIDTH * WIDTH)


def _sgd_scan(num_devices: int):
    """A scan of 8 data-parallel SGD steps on `num_devices` devices, compiled."""
    mesh = Mesh(np.array(jax.devices()[:num_devices]), ("batch",))
    replicated = NamedSharding(mesh, PartitionSpec())

    def sgd(w, x):
        def step(w, batch):
            grad = jax.grad(lambda w: jnp.sum(jnp.tanh(batch @ w)))(w)
            grad = jax.lax.with_sharding_constraint(grad, replicated)
            return w - 0.1 * grad, None

        return jax.lax.scan(step, w, x)[0]

    w = jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32, sharding=replicated)
    x = jax.ShapeDtypeStruct(
        (STEPS, BATCH, WIDTH),
        jnp.float32,
        sharding=NamedSharding(mesh, PartitionSpec(None, "batch")),
    )
    return jax.jit(sgd).lower(w, x).compile()


def test_a_loop_body_counts_as_often_as_it_runs():
    compiled = _sgd_scan(num_devices=4)
    cost = hlo_cost.program_cost(compiled.as_text(), num_devices=4)
    per_device = STEPS * FLOPS_PER_STEP / 4
    assert cost.flops == per_device
    assert cost.unknown_loops == 0
    # XLA's own analysis counts the body once: the trap this module exists for.
    assert compiled.cost_analysis()["flops"] < per_device / 4
    # One all-reduce of the weight gradient per step, over the 4 devices.
    (gradient,) = [c for c in cost.collectives if c.payload_bytes == WIDTH * WIDTH * 4]
    assert (gradient.kind, gradient.group_size, gradient.count) == ("all-reduce", 4, STEPS)
    assert cost.collective_bytes >= STEPS * WIDTH * WIDTH * 4


def test_a_trip_count_is_read_from_the_loop_where_xla_writes_none():
    # TPU programs carry no known_trip_count: the count comes from the loop's own
    # constants (start, step, bound).
    text = _sgd_scan(num_devices=2).as_text()
    stripped = re.sub(r'"known_trip_count":\{"n":"\d+"\},?', "", text)
    assert stripped != text
    cost = hlo_cost.program_cost(stripped, num_devices=2)
    assert cost.flops == STEPS * FLOPS_PER_STEP / 2
    assert cost.unknown_loops == 0


def test_an_unreadable_loop_counts_once_and_says_so():
    text = _sgd_scan(num_devices=2).as_text()
    stripped = re.sub(r'"known_trip_count":\{"n":"\d+"\},?', "", text)
    # The loop bound is no longer a constant.
    unreadable = re.sub(r"constant\(8\)", "parameter(7)", stripped)
    cost = hlo_cost.program_cost(unreadable, num_devices=2)
    assert cost.unknown_loops == 1
    assert cost.flops == FLOPS_PER_STEP / 2


# Hand-written HLO: one [2,3] x [3,4] product is 2 x 8 outputs x 3 summed = 48 FLOPs.
PRODUCT_FLOPS = 48
_STATE = "(s32[], f32[2,3]{1,0}, f32[3,4]{1,0})"
_CONTRACT = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"


def _product(name: str, dtype: str = "f32") -> str:
    """A computation of one [2,3] x [3,4] product of `dtype`, as XLA prints it."""
    return f"""
%{name} (x: {dtype}[2,3], y: {dtype}[3,4]) -> {dtype}[2,4] {{
  %{name}.x = {dtype}[2,3]{{1,0}} parameter(0)
  %{name}.y = {dtype}[3,4]{{1,0}} parameter(1)
  ROOT %{name}.dot = {dtype}[2,4]{{1,0}} dot(%{name}.x, %{name}.y), {_CONTRACT}
}}
"""


def _entry(*body_lines: str) -> str:
    lines = "\n".join(f"  {line}" for line in body_lines)
    return f"""
ENTRY %main (a: f32[2,3], b: f32[3,4]) -> f32[2,3] {{
  %a = f32[2,3]{{1,0}} parameter(0)
  %b = f32[3,4]{{1,0}} parameter(1)
{lines}
  ROOT %out = f32[2,3]{{1,0}} copy(%a)
}}
"""


def test_a_computation_called_from_two_loops_counts_once_per_run_of_each():
    # Two loops (3 and 5 trips) share one body, whose fusion calls the product: 8 runs,
    # not the 3 + 5 + 8 a re-walk per call site would give its callee.
    hlo = (
        _product("product")
        + f"""
%body (s: {_STATE}) -> {_STATE} {{
  %s = {_STATE} parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[2,3]{{1,0}} get-tuple-element(%s), index=1
  %y = f32[3,4]{{1,0}} get-tuple-element(%s), index=2
  %fused = f32[2,4]{{1,0}} fusion(%x, %y), kind=kOutput, calls=%product
  ROOT %next = {_STATE} tuple(%i, %x, %y)
}}

%condition (c: {_STATE}) -> pred[] {{
  %c = {_STATE} parameter(0)
  ROOT %go = pred[] constant(true)
}}
"""
        + _entry(
            "%zero = s32[] constant(0)",
            f"%init = {_STATE} tuple(%zero, %a, %b)",
            f"%three = {_STATE} while(%init), condition=%condition, body=%body, "
            'backend_config={"known_trip_count":{"n":"3"}}',
            f"%five = {_STATE} while(%init), condition=%condition, body=%body, "
            'backend_config={"known_trip_count":{"n":"5"}}',
        )
    )
    cost = hlo_cost.program_cost(hlo, num_devices=1)
    assert cost.flops == 8 * PRODUCT_FLOPS
    assert cost.unknown_loops == 0


def test_a_called_computation_counts_once_per_call():
    # main calls `twice` twice; `twice` calls the product twice: 4 products.
    hlo = (
        _product("product")
        + """
%twice (x: f32[2,3], y: f32[3,4]) -> f32[2,4] {
  %twice.x = f32[2,3]{1,0} parameter(0)
  %twice.y = f32[3,4]{1,0} parameter(1)
  %first = f32[2,4]{1,0} call(%twice.x, %twice.y), to_apply=%product
  ROOT %second = f32[2,4]{1,0} call(%twice.x, %twice.y), to_apply=%product
}
"""
        + _entry(
            "%one = f32[2,4]{1,0} call(%a, %b), to_apply=%twice",
            "%two = f32[2,4]{1,0} call(%a, %b), to_apply=%twice",
        )
    )
    assert hlo_cost.program_cost(hlo, num_devices=1).flops == 4 * PRODUCT_FLOPS


def _two_products(name: str) -> str:
    return f"""
%{name} (x: f32[2,3], y: f32[3,4]) -> f32[2,4] {{
  %{name}.x = f32[2,3]{{1,0}} parameter(0)
  %{name}.y = f32[3,4]{{1,0}} parameter(1)
  %{name}.first = f32[2,4]{{1,0}} dot(%{name}.x, %{name}.y), {_CONTRACT}
  ROOT %{name}.second = f32[2,4]{{1,0}} dot(%{name}.x, %{name}.y), {_CONTRACT}
}}
"""


@pytest.mark.parametrize(
    "branches",
    [
        "true_computation=%heavy, false_computation=%light",
        "branch_computations={%light, %heavy}",
    ],
)
def test_a_conditional_counts_its_most_expensive_branch_only(branches):
    hlo = (
        _product("light")
        + _two_products("heavy")
        + _entry(
            "%flag = pred[] constant(true)",
            f"%chosen = f32[2,4]{{1,0}} conditional(%flag, %a, %b), {branches}",
        )
    )
    assert hlo_cost.program_cost(hlo, num_devices=1).flops == 2 * PRODUCT_FLOPS


def test_flops_are_kept_by_the_element_type_multiplied():
    hlo = (
        _product("single")
        + _product("half", "bf16")
        + _entry(
            "%one = f32[2,4]{1,0} call(%a, %b), to_apply=%single",
            "%a16 = bf16[2,3]{1,0} convert(%a)",
            "%b16 = bf16[3,4]{1,0} convert(%b)",
            "%two = bf16[2,4]{1,0} call(%a16, %b16), to_apply=%half",
        )
    )
    cost = hlo_cost.program_cost(hlo, num_devices=1)
    assert cost.flops_by_type == {"f32": PRODUCT_FLOPS, "bf16": PRODUCT_FLOPS}


@pytest.mark.parametrize(
    ("attributes", "size"),
    [
        ("replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add", 4),
        ("replica_groups=[2,4]<=[8], to_apply=%add", 4),
        ("replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}, to_apply=%add", 4),
        ("replica_groups={}, to_apply=%add", 8),
    ],
)
def test_collective_group_sizes(attributes, size):
    assert hlo_cost.group_size(attributes, num_devices=8) == size


def test_accelerator_types_name_their_default_slices():
    assert accelerators.topology_name("v5litepod-8") == "v5e:2x4"
    assert accelerators.topology_name("v4-16") == "v4:2x2x2"  # v4 types count TensorCores.
    assert accelerators.topology_name("v5p-128") == "v5p:4x4x4"
    assert accelerators.accelerator_type("v6e:2x2") == "v6e-4"
    with pytest.raises(ConfigError, match="--topology=v4-12: no default slice shape"):
        accelerators.topology_name("v4-12")
    with pytest.raises(ConfigError, match="--topology=tpu9: not a topology name"):
        accelerators.devices("tpu9")


def _proxy_config(**overrides):
    config = load_config("ppo_cartpole")
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (0, 1, 2, 3)
    for key, value in overrides.items():
        section, name = key.split(".")
        config[section][name] = value
    return config


@pytest.fixture(scope="module")
def proxy_report():
    """The report on ppo_cartpole's proxy config for 4 H100s, checked once for the tests
    that read it (a check compiles the update and the policy step)."""
    return check.check(_proxy_config(), "h100:4", gpu_proxy=True)


def test_the_gpu_proxy_reports_a_run_that_fits(proxy_report):
    report = proxy_report
    assert report["fits"] is True
    assert report["proxy"] is True
    assert report["learner_devices"] == 4
    # JAX's GPU allocator takes 75% of the card by default: that is what must hold it.
    assert report["hbm_bytes"] == 80 * 10**9
    assert 0 < report["hbm_needed_bytes"] <= report["hbm_usable_bytes"] == 60 * 10**9
    assert report["memory_advice"] is None
    # The gradients are averaged over the 4 learner devices at every minibatch step.
    assert {c["group_size"] for c in report["learner"]["collectives"]} == {4}
    assert report["collective_bytes_per_update"] > 0
    assert report["flops_per_update"] == pytest.approx(4 * report["learner"]["flops"])
    low, high = report["predicted_update_s"]
    assert 0 < low <= high
    text = check.format_report(report, "configs/ppo_cartpole.py")
    assert "fits" in text and "DOES NOT FIT" not in text
    # The GPU prices are XLA's fastest kernels: the run's deterministic ones are named.
    assert "debug.deterministic_gpu, on by default" in text
    fast = check.check(
        _proxy_config(**{"debug.deterministic_gpu": False}), "h100:4", gpu_proxy=True
    )
    assert "deterministic_gpu" not in check.format_report(fast, "configs/ppo_cartpole.py")
    assert fast["predicted_update_s"] == report["predicted_update_s"]


def test_the_check_says_whether_the_launch_fuses_update_and_rollout(proxy_report):
    # One GPU both acting and learning: auto fuses there, and the report says so.
    one = {"mesh.learner_device_ids": (0,), "pipeline.actor_loop": "scan"}
    report = check.check(_proxy_config(**one), "h100:1", gpu_proxy=True)
    assert report["fused"] == {
        "fused": True,
        "why": "actor and learner share one GPU: the update's pieces run while the envs step",
    }
    assert "fused step: on: the update and the next rollout as one program" in (
        check.format_report(report, "configs/ppo_cartpole.py")
    )
    # Learners of their own: nothing to fuse, and the reason is the launch's.
    apart = proxy_report
    assert apart["fused"]["fused"] is False
    assert apart["fused"]["why"].startswith("actor and learner devices do not coincide")


def test_auto_choices_resolve_as_the_pricing_was_calibrated():
    # The check compiles on CPU devices, where "auto" would take the CPU's choices.
    config = load_config("ppo_atari", "smoke")
    check.resolve_for_accelerators(config)
    assert (config.agent.max_pool, config.agent.minibatch_loop) == ("reduce_window", "scan")
    config.agent.max_pool = "slices"
    check.resolve_for_accelerators(config)
    assert config.agent.max_pool == "slices"  # A choice the user made is kept.


def test_the_gpu_allocator_share_follows_jax_s_memory_fraction(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".5")
    _, chip = accelerators.devices("h100:1")
    assert chip.allocatable_bytes == 40 * 10**9
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "2")
    with pytest.raises(ConfigError, match=r"XLA_PYTHON_CLIENT_MEM_FRACTION=2 must lie in"):
        accelerators.devices("h100:1")


def test_float32_products_are_priced_at_tf32_on_gpus_and_at_peak_on_tpus():
    h100, v5e = accelerators.CHIPS["h100"], accelerators.CHIPS["TPU v5 lite"]
    # NVIDIA's dense figures: TF32 is half the bf16 rate.
    assert h100.flops_per_s("f32") / h100.flops_per_s("bf16") == pytest.approx(494.7 / 989)
    assert v5e.flops_per_s("f32") == v5e.flops_per_s("bf16") == v5e.peak_flops
    assert accelerators.CHIPS["TPU v5"].hbm_bytes == 95 * 10**9  # Google: 95 GB.


def test_a_gpu_scan_actor_holds_a_whole_rollout_on_its_device():
    step = check.check(_proxy_config(**{"pipeline.actor_loop": "step"}), "h100:4", gpu_proxy=True)
    scan = check.check(_proxy_config(**{"pipeline.actor_loop": "scan"}), "h100:4", gpu_proxy=True)
    assert step["actor_step"]["rollout_bytes_per_thread"] == 0
    # CartPole, 4 envs x 128 steps: obs 129 x 4 x 4 float32 at least.
    rollout = scan["actor_step"]["rollout_bytes_per_thread"]
    assert rollout >= 129 * 4 * 4 * 4
    assert scan["actor_step"]["hbm_needed_bytes"] == step["actor_step"]["hbm_needed_bytes"] + (
        scan["actor_step"]["threads_per_device"] * rollout
    )


def test_verdicts_name_idle_chips_and_a_faster_smaller_layout():
    report = check.check(_proxy_config(), "h100:8", gpu_proxy=True)
    text = check.format_report(report, "x")
    assert "idle chips: 4 of 8 per host" in text
    # CartPole's update is tiny: its gradient all-reduces over 4 devices cost more than
    # the work they split, so one learner device is predicted faster.
    smaller = report["faster_smaller_layout"]
    assert smaller["learner_devices"] == 1
    assert smaller["predicted_update_s"][1] < report["predicted_update_s"][0]
    assert "slower than a smaller layout: 1 learner device(s)" in text
    # The policy step takes nanoseconds: shown as such, never as 0.0 us.
    assert "predicted 0.0 us" not in text
    low = report["actor_step"]["predicted_s"][0]
    assert 0 < low < 1e-6 and check_report.format_seconds(low).endswith(" ns")


def test_a_collective_bound_update_is_flagged_where_no_smaller_layout_is_priced_faster():
    layout = types.SimpleNamespace(
        actor_devices=[types.SimpleNamespace(id=0)],
        local_learner_devices=[types.SimpleNamespace(id=i) for i in range(4)],
    )
    report = {
        "fits": True,
        "architecture": "sebulba",
        "devices_per_process": 4,
        "learner_devices": 4,
        "faster_smaller_layout": None,
        "learner": {"compute_s": 1e-3, "memory_s": 2e-3, "collective_s": 3e-3},
    }
    (verdict,) = check_report.verdicts(report, layout)
    assert verdict.startswith("collective-bound: the update's collectives (3 ms) outlast")
    report["learner"]["collective_s"] = 1e-3
    assert check_report.verdicts(report, layout) == []


def test_an_anakin_config_is_costed_as_the_runner_s_act_and_learn_program():
    config = load_config("ppo_cartpole_anakin")
    config.mesh.learner_device_ids = (0, 1)
    report = check.check(config, "h100:2", gpu_proxy=True)
    assert report["architecture"] == "anakin"
    assert report["actor_step"] is None
    # The env steps run inside the program: a Sebulba learner update has no CartPole
    # physics, so the Anakin program's traffic exceeds the same agent's update alone.
    sebulba_config = _proxy_config(**{"mesh.learner_device_ids": (0, 1)})
    for key in ("num_envs", "num_steps"):
        section = "env" if key == "num_envs" else "agent"
        sebulba_config[section][key] = config[section][key]
    sebulba_config.total_timesteps = config.total_timesteps
    learner_only = check.check(sebulba_config, "h100:2", gpu_proxy=True)
    assert report["learner"]["bytes_accessed"] > learner_only["learner"]["bytes_accessed"]
    assert "act-and-learn program" in check.format_report(report, "x")


def test_a_run_too_big_for_the_chip_is_reported_with_the_launch_advice():
    # 262,144 envs x 8,192 steps of CartPole: rollouts of 17.5 GiB per learner device,
    # and over 200 GiB of temporaries.
    config = _proxy_config(**{"env.num_envs": 262144, "agent.num_steps": 8192})
    config.total_timesteps = 262144 * 8192
    report = check.check(config, "h100:4", gpu_proxy=True)
    assert report["fits"] is False
    assert report["hbm_needed_bytes"] > report["hbm_bytes"]
    assert "lower env.num_envs or agent.num_steps" in report["memory_advice"]
    assert "DOES NOT FIT" in check.format_report(report, "x")


def test_a_config_that_cannot_run_on_the_slice_fails_as_at_launch():
    with pytest.raises(ConfigError, match=r"mesh.actor_device_ids contains 4, but this "):
        check.check(_proxy_config(**{"mesh.actor_device_ids": (4,)}), "h100:4", gpu_proxy=True)
    with pytest.raises(ConfigError, match=r"env.num_envs \(4\) must be divisible"):
        check.check(
            _proxy_config(**{"mesh.learner_device_ids": (0, 1, 2)}), "h100:4", gpu_proxy=True
        )


def _run_check(*args):
    env = process_env()  # No device count: the check asks for the devices it needs.
    return run_python("-m", "sebulba.check", *args, env=env, timeout=600)


def test_the_command_line_refuses_a_bad_topology_in_one_line():
    result = _run_check("--config=configs/ppo_cartpole.py", "--topology=v5e:banana")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "sebulba: config error: --topology=v5e:banana: not a topology name; give a TPU "
        "slice as GENERATION:SHAPE (v4, v5e, v5p, v6e; e.g. v5e:2x4, v4:2x2x2) or as its "
        "accelerator type (v5litepod-8, v4-16), or GPUs as h100:N, h200:N or a100:N (one "
        "host of N <= 8) or CARD:HxN (H hosts of N, e.g. h100:2x8)"
    ]


needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason='libtpu is not installed (pip install -e ".[tpu-check]"): no TPU compile',
)


def test_a_run_that_does_not_fit_exits_non_zero_naming_the_gpu_s_memory():
    # A CartPole DQN whose 10.7 billion-transition buffer needs 270 GiB of an H100.
    result = _run_check(
        "--config=configs/dqn_cartpole.py",
        "--topology=h100:1",
        "--gpu_proxy",
        "--config.agent.buffer_size=10737418240",
    )
    assert result.returncode == check.DOES_NOT_FIT_STATUS == 3, result.stderr[-2000:]
    text = result.stdout
    assert "DOES NOT FIT" in text and "Traceback" not in result.stderr
    # The proxy's CPU devices stand in for the GPU: its figure is the GPU's own memory.
    advice = r"but the device memory of a learner device is [\d.]+ GiB: lower agent\.buffer_size"
    assert re.search(advice, text), text
    assert "host's available memory" not in text
    # DQN has no minibatches, so no minibatch loop is named.
    layout = next(line for line in text.splitlines() if line.startswith("layout:"))
    assert layout.endswith("8 envs, 80 env steps per update"), layout


@needs_libtpu
@pytest.mark.parametrize(
    ("topology", "chips", "hosts"),
    [
        # Cloud TPU's tables: v4 and v5p hosts hold 4 chips (2x2x1).
        ("v4:2x2x1", 4, 1),
        ("v4-16", 8, 2),
        ("v5p:2x2x2", 8, 2),
        ("v5p-32", 16, 4),
        # v5e and v6e: 1x1, 2x2 and 2x4 are one host; larger slices have 8 chips a host.
        ("v5litepod-1", 1, 1),
        ("v5e:2x2", 4, 1),
        ("v5litepod-8", 8, 1),
        ("v5e:4x4", 16, 2),
        ("v5e:8x8", 64, 8),
        ("v6e:2x4", 8, 1),
        ("v6e-16", 16, 2),
    ],
)
def test_slices_have_the_hosts_cloud_tpu_rents(topology, chips, hosts):
    check.quiet_libtpu(topology)
    devices, _ = accelerators.devices(topology)
    assert (len(devices), len({d.process_index for d in devices})) == (chips, hosts)


@needs_libtpu
@pytest.mark.parametrize(
    ("topology", "error"),
    [
        ("v5e:2x3", "--topology=v5e:2x3: Cloud TPU rents v5e slices as 1x1, 2x2, 2x4, "),
        ("v6e:4x2", "--topology=v6e:4x2: Cloud TPU rents v6e slices as"),
        ("v4:2x3x1", "--topology=v4:2x3x1: a v4 slice is XxYxZ chips made of hosts of 2x2x1"),
        ("v5p:2x2", "--topology=v5p:2x2: a v5p slice is XxYxZ chips"),
    ],
)
def test_a_slice_cloud_tpu_does_not_rent_is_refused_in_one_line(topology, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        accelerators.devices(topology)


@needs_libtpu
def test_a_config_the_tpu_compiler_refuses_for_memory_gets_the_does_not_fit_verdict():
    # The report built in this process, as `python -m sebulba.check` builds it (the
    # command line's exit status for a run that does not fit is
    # test_a_run_that_does_not_fit_exits_non_zero_naming_the_gpu_s_memory's).
    topology = "v5litepod-8"
    check.quiet_libtpu(topology)
    config = load_config("ppo_atari")
    # One v5e host of 8 chips: learner devices 2..7 exist, as on the real slice.
    config.mesh.actor_device_ids = (0,)
    config.mesh.learner_device_ids = (2, 3, 4, 5, 6, 7)
    config.env.num_envs = 96
    config.agent.num_steps = 16384
    config.total_timesteps = 100000000
    report = check.check(config, topology)
    assert report["fits"] is False
    text = check.format_report(report, "configs/ppo_atari.py")
    assert "8 x TPU v5e, 1 host(s) of 8" in text
    (verdict,) = [line for line in text.splitlines() if "does not fit:" in line]
    assert re.search(r"needs [0-9.,]+ GiB per device, a TPU v5e device has 1[0-9.]+ GiB", verdict)
    assert "idle chips: 1 of 8 per host" in text  # Chip 1 is in neither list.


@pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason='libtpu is not installed (pip install -e ".[tpu-check]"): no TPU compile',
)
def test_a_run_compiles_for_a_tpu_slice_without_one():
    result = _run_check(
        "--config=configs/ppo_cartpole.py",
        "--topology=v5litepod-4",
        "--config.mesh.learner_device_ids=(0,1,2,3)",
        "--json",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # libtpu's probing for a TPU VM is kept quiet; stderr says what compiles, and how long
    # it took (stdout holds the report alone). A compile longer than 30 s (a loaded
    # machine) also says it is still compiling, which is no part of the check.
    still = "sebulba: still compiling "
    said = [line for line in result.stderr.splitlines() if not line.startswith(still)]
    assert said[0] == "sebulba: compiling the learner update for v5litepod-4 ...", said
    assert re.fullmatch(r"sebulba: compiled the learner update for v5litepod-4 in [\d:]+", said[1])
    assert said[2] == "sebulba: compiling the actors' policy step for TPU v5e ...", said
    assert said[3].startswith("sebulba: compiled the actors' policy step") and len(said) == 4
    report = json.loads(result.stdout)
    assert report["chip"] == "TPU v5e"
    assert report["proxy"] is False
    assert (report["devices"], report["learner_devices"]) == (4, 4)
    assert report["fits"] is True
    assert report["hbm_bytes"] == report["hbm_usable_bytes"] == 16 * 10**9
    for key in ("hbm_needed_bytes", "collective_bytes_per_update", "flops_per_update"):
        assert report[key] > 0, key
    low, high = report["predicted_update_s"]
    assert 0 < low <= high
    assert report["learner"]["unknown_loops"] == 0  # TPU loops: counts read from the HLO.
    assert {c["group_size"] for c in report["learner"]["collectives"]} == {4}

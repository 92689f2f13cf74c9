#!/usr/bin/env bash
# Acting and learning on one shared GPU, and what deterministic GPU execution costs
# (docs/benchmarks.md, "On a GPU"), ~35 min on one H200 + 16 cores:
#
#   bash benchmarks/gpu_overlap.sh [OUT_DIR]
#   PARTS=actor_platform bash benchmarks/gpu_overlap.sh     # one part only
#   RUNNER="bash .gpu/run.sh" bash benchmarks/gpu_overlap.sh   # through a wrapper
#
# 1. `two_threads`: two actor threads running scan rollouts on the one GPU (IMPALA Atari as
#    shipped, the scan loop forced), seven runs side by side, each with an eighth of the
#    GPU's memory: as shipped, with one suspect removed per run (XLA's command buffers, the
#    caching allocator, asynchronous kernel launches, the one-step lag), PPO instead of
#    IMPALA, and the step loop. The first three updates' losses tell which runs hand the
#    learner sound data.
# 2. `scan_shapes`: one thread of 64 or 32 envs (with XLA's autotuner or its Triton GEMMs
#    off), and two threads of 64 with the Nature CNN instead of the ResNet.
# 3. `actor_platform`: the same run with the policy on the GPU (default) and on the
#    host's CPUs, one after the other so each has the node to itself: an MLP on MuJoCo
#    and on CartPole, the IMPALA ResNet on Atari (one thread of 128 envs, then two of 64).
# 4. `determinism`: what `debug.deterministic_gpu` (on by default) costs: PPO and IMPALA
#    Atari end to end with it on and off, and PPO's learner-only and actor-only ceilings
#    (`benchmarks/ceilings.py`, actor and learner on the one GPU) under each, into
#    OUT_DIR/ceilings_deterministic_{on,off}.txt.
# 5. `determinism_flags`: which part of it costs: PPO's learner-only ceiling with only
#    `--xla_gpu_exclude_nondeterministic_ops` (deterministic kernels, the autotuner on),
#    with XLA's autotuner off (`--xla_gpu_autotune_level=0`) with and without it, and a
#    short run with both, each bounded by 120 s (OUT_DIR/ceilings_flags_*.txt).
# 6. `kernels`: where PPO Atari's learner update spends its time, kernel by kernel
#    (`benchmarks/learner_profile.py`, deterministic kernels on and off), and the ResNet's
#    gradient at PPO's minibatch (4,096 frames) with either max-pool
#    (`benchmarks/max_pool.py`, on and off): OUT_DIR/profile_*.txt, OUT_DIR/max_pool_*.txt;
#    XLA's command buffers off for the profiles, so that each kernel is charged its own time.
#    Then `max_pool` end to end: PPO Atari with the max-pool `auto` does not take (flax's
#    under deterministic kernels, the slices without), to set beside `determinism`'s runs.
# 7. `crossover`: where acting on the host's CPUs stops paying, between `actor_platform`'s
#    MLP (2e4 policy FLOPs per env step: 1.97x faster on the CPUs) and ResNet (1.1e8: 0.39x):
#    HalfCheetah with 1024-1024 and 2048-2048 MLPs (4.3e6, 1.7e7) and Atari with the Nature
#    CNN (1.9e7), each with the policy on the GPU and on the CPUs, 65,536 env steps each
#    (~4 min). The FLOPs are the actor program's, per env step, from `python -m
#    sebulba.check --config=CONFIG --topology=h100:1 [--config.KEY=VALUE]` on any machine
#    ("actor policy step" over the envs of one step).
# 8. `resnet_shapes`: the ResNet configs with the slices max-pool that `auto` now takes under
#    deterministic kernels: IMPALA Atari as shipped and with flax's max-pool, and PPO Atari
#    with two actor threads of 64 envs on the step loop and on the scan loop (~4 min).
# 9. `actor_anatomy`: where PPO Atari's actors spend their time on the GPU
#    (`benchmarks/ceilings.py --only=raw,actor`, actor and learner on the one GPU): raw
#    envpool from Python and in a scan, actor-only per loop, the step loop's policy calls
#    with their copies, the scan loop's policy step, and the handoff per loop, into
#    OUT_DIR/ceilings_actor_anatomy.txt (~3 min).
# OUT_DIR/runs.txt gets one line of figures per run (sps, limiting side, learner wait,
# host CPU share).
set -u
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-runs/gpu_overlap}} WORK=${WORK:-/tmp/sebulba_gpu_overlap}
source benchmarks/gpu_runs.sh
rm -f "$OUT/runs.txt"
export RUN_TIMEOUT=${RUN_TIMEOUT:-150}

TWO_THREADS=(configs/impala_atari.py:Breakout-v5 --config.total_timesteps=7680
  --config.log.every_updates=1 --config.ckpt.every_updates=0)
two_threads() {
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.12 METRICS_LINES=3
  run two_threads_scan "${TWO_THREADS[@]}" --config.pipeline.actor_loop=scan &
  XLA_FLAGS=--xla_gpu_enable_command_buffer= run two_threads_scan_no_command_buffers \
    "${TWO_THREADS[@]}" --config.pipeline.actor_loop=scan &
  XLA_PYTHON_CLIENT_ALLOCATOR=platform run two_threads_scan_platform_allocator \
    "${TWO_THREADS[@]}" --config.pipeline.actor_loop=scan &
  CUDA_LAUNCH_BLOCKING=1 run two_threads_scan_launch_blocking \
    "${TWO_THREADS[@]}" --config.pipeline.actor_loop=scan &
  run two_threads_step "${TWO_THREADS[@]}" --config.pipeline.actor_loop=step &
  two_threads_lag_and_agent
}

two_threads_lag_and_agent() {  # Part of `two_threads`; also a part of its own.
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.12 METRICS_LINES=3
  run two_threads_scan_lag_0 "${TWO_THREADS[@]}" --config.pipeline.actor_loop=scan \
    --config.pipeline.policy_lag=0 &
  run two_threads_scan_ppo configs/ppo_atari.py:Breakout-v5 --config.total_timesteps=49152 \
    --config.log.every_updates=1 --config.ckpt.every_updates=0 \
    --config.pipeline.num_actor_threads=2 --config.env.num_envs=64 \
    --config.pipeline.actor_loop=scan &
  wait
  unset XLA_PYTHON_CLIENT_MEM_FRACTION METRICS_LINES
}

scan_shapes() {  # One thread: envs per program, XLA's autotuner and Triton GEMMs; the network.
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.2 METRICS_LINES=2
  local one=(configs/impala_atari.py:Breakout-v5 --config.log.every_updates=1
    --config.ckpt.every_updates=0 --config.pipeline.actor_loop=scan
    --config.pipeline.num_actor_threads=1)
  run scan_1x64 "${one[@]}" --config.total_timesteps=3840 &
  run scan_1x32 "${one[@]}" --config.env.num_envs=32 --config.total_timesteps=1920 &
  XLA_FLAGS=--xla_gpu_autotune_level=0 run scan_1x64_no_autotune "${one[@]}" \
    --config.total_timesteps=3840 &
  XLA_FLAGS=--xla_gpu_enable_triton_gemm=false run scan_1x64_no_triton_gemm "${one[@]}" \
    --config.total_timesteps=3840 &
  run scan_2x64_nature_cnn "${TWO_THREADS[@]}" --config.pipeline.actor_loop=scan \
    --config.agent.network=nature_cnn &
  wait
  unset XLA_PYTHON_CLIENT_MEM_FRACTION METRICS_LINES
}

actor_platform() {
  STEPS=--config.total_timesteps=131072
  for actor in default cpu; do
    run "mujoco_${actor}_actor" configs/ppo_mujoco.py:HalfCheetah-v4 "$STEPS" \
      --config.ckpt.every_updates=0 --config.mesh.actor_platform=$actor
  done
  for actor in default cpu; do
    # The scan loop as measured (auto now keeps 4 envs per thread on a GPU on the step loop).
    run "cartpole_${actor}_actor" configs/ppo_cartpole.py "$STEPS" \
      --config.ckpt.every_updates=0 --config.mesh.actor_platform=$actor \
      --config.pipeline.actor_loop=scan
  done
  for actor in default cpu; do
    run "atari_${actor}_actor_1x128" configs/ppo_atari.py:Breakout-v5 "$STEPS" \
      --config.ckpt.every_updates=0 --config.mesh.actor_platform=$actor
  done
  run atari_cpu_actor_2x64 configs/ppo_atari.py:Breakout-v5 "$STEPS" \
    --config.ckpt.every_updates=0 --config.mesh.actor_platform=cpu \
    --config.pipeline.num_actor_threads=2 --config.env.num_envs=64
}

determinism() {
  local steps=--config.total_timesteps=98304
  for deterministic in True False; do
    local on=$([ $deterministic = True ] && echo on || echo off)
    run "ppo_atari_deterministic_$on" configs/ppo_atari.py:Breakout-v5 "$steps" \
      --config.ckpt.every_updates=0 --config.debug.deterministic_gpu=$deterministic
    run "impala_atari_deterministic_$on" configs/impala_atari.py:Breakout-v5 "$steps" \
      --config.ckpt.every_updates=0 --config.debug.deterministic_gpu=$deterministic
    timeout "$RUN_TIMEOUT" $R python3 benchmarks/ceilings.py \
      --config=configs/ppo_atari.py:Breakout-v5 --only=actor,learner --seconds=5 \
      --set "mesh.actor_device_ids=(0,)" --set "mesh.learner_device_ids=(0,)" \
      --set debug.deterministic_gpu=$deterministic >"$OUT/ceilings_deterministic_$on.txt" 2>&1
  done
}

determinism_flags() {
  local exclude=--xla_gpu_exclude_nondeterministic_ops=true autotune_off=--xla_gpu_autotune_level=0
  local -A flags=([exclude]="$exclude" [exclude_autotune_off]="$exclude $autotune_off"
    [autotune_off]="$autotune_off")
  for name in exclude exclude_autotune_off autotune_off; do
    XLA_FLAGS="${flags[$name]}" timeout 120 $R python3 benchmarks/ceilings.py \
      --config=configs/ppo_atari.py:Breakout-v5 --only=learner --seconds=5 \
      --set "mesh.actor_device_ids=(0,)" --set "mesh.learner_device_ids=(0,)" \
      --set debug.deterministic_gpu=False >"$OUT/ceilings_flags_$name.txt" 2>&1
  done
  XLA_FLAGS="$exclude $autotune_off" RUN_TIMEOUT=120 run ppo_atari_exclude_autotune_off \
    configs/ppo_atari.py:Breakout-v5 --config.total_timesteps=65536 \
    --config.ckpt.every_updates=0 --config.debug.deterministic_gpu=False
}

kernels() {
  for deterministic in True False; do
    local on=$([ $deterministic = True ] && echo on || echo off)
    timeout "$RUN_TIMEOUT" $R python3 benchmarks/learner_profile.py \
      --config=configs/ppo_atari.py:Breakout-v5 --updates=3 --top=25 \
      --set "mesh.actor_device_ids=(0,)" --set "mesh.learner_device_ids=(0,)" \
      --set debug.deterministic_gpu=$deterministic --no_command_buffers \
      >"$OUT/profile_deterministic_$on.txt" 2>&1
    local flag=$([ $deterministic = True ] && echo "" || echo --nondeterministic)
    timeout "$RUN_TIMEOUT" $R python3 benchmarks/max_pool.py --batch=4096 --rounds=3 $flag \
      >"$OUT/max_pool_deterministic_$on.txt" 2>&1
  done
}

max_pool() {
  for deterministic in True False; do
    local on=$([ $deterministic = True ] && echo on || echo off)
    local other=$([ $deterministic = True ] && echo reduce_window || echo slices)
    run "ppo_atari_${other}_deterministic_$on" configs/ppo_atari.py:Breakout-v5 \
      --config.total_timesteps=98304 --config.ckpt.every_updates=0 \
      --config.agent.max_pool=$other --config.debug.deterministic_gpu=$deterministic
  done
}

crossover() {
  local steps=--config.total_timesteps=65536
  for width in 1024 2048; do
    for actor in default cpu; do
      run "mujoco_mlp${width}_${actor}_actor" configs/ppo_mujoco.py:HalfCheetah-v4 "$steps" \
        --config.ckpt.every_updates=0 --config.mesh.actor_platform=$actor \
        "--config.agent.hidden_sizes=($width,$width)"
    done
  done
  for actor in default cpu; do
    run "atari_nature_cnn_${actor}_actor" configs/ppo_atari.py:Breakout-v5 "$steps" \
      --config.ckpt.every_updates=0 --config.mesh.actor_platform=$actor \
      --config.agent.network=nature_cnn
  done
}

resnet_shapes() {
  local steps=--config.total_timesteps=98304
  for pool in auto reduce_window; do
    run "impala_atari_max_pool_$pool" configs/impala_atari.py:Breakout-v5 "$steps" \
      --config.ckpt.every_updates=0 --config.agent.max_pool=$pool
  done
  for loop in step scan; do
    run "ppo_atari_2x64_$loop" configs/ppo_atari.py:Breakout-v5 "$steps" \
      --config.ckpt.every_updates=0 --config.pipeline.num_actor_threads=2 \
      --config.env.num_envs=64 --config.pipeline.actor_loop=$loop
  done
}

actor_anatomy() {  # Up to 5 min: two rollout programs and two policy programs compile.
  timeout 300 $R python3 benchmarks/ceilings.py \
    --config=configs/ppo_atari.py:Breakout-v5 --only=raw,actor --seconds=5 \
    --set "mesh.actor_device_ids=(0,)" --set "mesh.learner_device_ids=(0,)" \
    >"$OUT/ceilings_actor_anatomy.txt" 2>&1
}

PARTS_IN_ORDER="two_threads scan_shapes actor_platform determinism determinism_flags kernels"
for part in ${PARTS:-$PARTS_IN_ORDER max_pool crossover resnet_shapes actor_anatomy}; do
  $part
done
cat "$OUT/runs.txt"

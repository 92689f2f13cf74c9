#!/usr/bin/env bash
# The GPU checks and figures of docs/benchmarks.md ("On a GPU"), in one go on a one-GPU node:
#
#   bash benchmarks/gpu_checks.sh [OUT_DIR]        # ~10 min on one H200 + 16 cores
#   RUNNER="bash .gpu/run.sh" bash benchmarks/gpu_checks.sh   # through a wrapper
#
# 1. tests/gpu, four pytest workers sharing the GPU (each holds a fifth of its memory);
# 2. Anakin: one update per program call against several (CartPole with PureJaxRL's
#    settings; MinAtar Breakout's CNN for 3M steps), same seed, so the checksums must agree;
# 3. on-GPU numerics of the two actor loops: IMPALA Atari's first three updates, scan and
#    step, with XLA's autotuner on (the default) and off;
# 4. Atari end to end on the one GPU: PPO with 1 actor thread (scan) and 4 or 8 threads of
#    fewer envs (auto: step), and PQN (scan).
# Each run writes OUT_DIR/NAME.log; OUT_DIR/runs.txt gets one line of figures per run and
# the first metrics lines of the loop comparison. Every run compiles (no persistent cache).
set -u
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-runs/gpu_checks}} WORK=${WORK:-/tmp/sebulba_gpu_checks}
source benchmarks/gpu_runs.sh
rm -f "$OUT/runs.txt"

XLA_PYTHON_CLIENT_MEM_FRACTION=0.2 timeout 600 $R python3 -m pytest tests/gpu -n 4 --dist=load \
  -q -p no:cacheprovider >"$OUT/gpu_tests.log" 2>&1
echo "tests/gpu: $(tail -1 "$OUT/gpu_tests.log")" >>"$OUT/runs.txt"

run cartpole_1_per_call configs/ppo_cartpole_anakin.py --config.pipeline.updates_per_call=1
run cartpole_100_per_call configs/ppo_cartpole_anakin.py
run minatar_1_per_call configs/ppo_minatar.py:Breakout --config.total_timesteps=3000000
run minatar_10_per_call configs/ppo_minatar.py:Breakout --config.total_timesteps=3000000 \
  --config.pipeline.updates_per_call=10

IMPALA=(configs/impala_atari.py:Breakout-v5 --config.pipeline.num_actor_threads=1
  --config.env.num_envs=128 --config.total_timesteps=7680 --config.log.every_updates=1
  --config.ckpt.every_updates=0)
METRICS_LINES=3 run impala_scan "${IMPALA[@]}" --config.pipeline.actor_loop=scan
METRICS_LINES=3 run impala_step "${IMPALA[@]}" --config.pipeline.actor_loop=step
METRICS_LINES=3 XLA_FLAGS=--xla_gpu_autotune_level=0 run impala_scan_no_autotune \
  "${IMPALA[@]}" --config.pipeline.actor_loop=scan
METRICS_LINES=3 XLA_FLAGS=--xla_gpu_autotune_level=0 run impala_step_no_autotune \
  "${IMPALA[@]}" --config.pipeline.actor_loop=step

PPO=(configs/ppo_atari.py:Breakout-v5 --config.ckpt.every_updates=0 --config.total_timesteps=196608)
run ppo_atari_1x128 "${PPO[@]}"
run ppo_atari_4x32 "${PPO[@]}" --config.pipeline.num_actor_threads=4 --config.env.num_envs=32
run ppo_atari_8x16 "${PPO[@]}" --config.pipeline.num_actor_threads=8 --config.env.num_envs=16
run pqn_atari configs/pqn_atari.py:Breakout-v5 --config.ckpt.every_updates=0 \
  --config.total_timesteps=300000
cat "$OUT/runs.txt"

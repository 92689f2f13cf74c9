"""What runs around the training loop: processes, devices, outputs, stopping.

  platforms        which JAX platforms a process starts, decided before JAX does
  gpu_determinism  XLA's deterministic GPU execution, chosen before JAX starts
  distributed      multi-process runs on `jax.distributed`: start-up, per-process log
                   tags, failure monitor and watchdog, episode gathering
  workdir          where a run writes, checked before any work
  compile_cache    JAX's persistent compilation cache for command-line runs
  threefry_lowering  the Threefry hash written out on CPU (one kernel, not a loop)
  stop_signals     SIGTERM and SIGINT as a request to stop cleanly after the update
  progress         console progress: a live bar on a terminal, plain lines elsewhere
  compile_progress  console lines while XLA compiles: which program, a heartbeat, its time
  metrics          metrics.jsonl, TensorBoard, wandb, the bottleneck report, summary.json

This file imports nothing, so `platforms` and `gpu_determinism` can decide before JAX
starts (sebulba/main.py calls them first).
"""

"""The pre-flight: what a run will cost on its target, before it starts (`sebulba.check`).

  accelerators     each accelerator kind's memory, peak FLOP/s and bandwidth, and the
                   TPU topologies and GPU hosts `sebulba.check --topology` compiles for
  gpu_targets      the NVIDIA GPUs a run compiles for without one (XLA's compile-only
                   CUDA devices, from XLA's published target specs)
  memory           the memory pre-check every run makes before training, and the learner
                   compiler options that bound its memory
  hlo_cost         FLOPs and bytes of a compiled program, from its HLO text
  hlo_text         parsing the HLO text of a compiled program
  program_pricing  a compiled program's predicted time on a target
  update_estimate  on a CPU learner, a floor on one update's time, said before update 1
  check_report     `sebulba.check`'s report: tables, verdicts, `check.json`

`python -m sebulba.check` (sebulba/check.py) runs it; docs/scaling.md describes it.
"""

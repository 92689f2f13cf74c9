# Shared by the GPU scripts of benchmarks/ (sourced, not run): `run` trains one config into
# $WORK/NAME, logs to $OUT/NAME.log and appends one line of figures to $OUT/runs.txt
# (steps/s, the limiting side, the learner's wait and how busy the run kept the CPUs).
#
#   OUT=DIR WORK=DIR RUNNER="bash .gpu/run.sh" source benchmarks/gpu_runs.sh
#   run NAME CONFIG [--config.KEY=VALUE ...]
#
# METRICS_LINES=N before `run` also prints the losses of the first N metrics lines;
# RUN_TIMEOUT (seconds, default 300) bounds each run. Every run compiles its programs
# (no persistent compilation cache), as a first run on a fresh node does.
set -u
OUT=${OUT:-runs/gpu}
WORK=${WORK:-/tmp/sebulba_gpu_runs}
mkdir -p "$OUT" "$WORK"
R=${RUNNER:-}
# A wrapper that installs packages on first use does so here, before any runs in parallel.
[ -z "$R" ] || $R true
export SEBULBA_COMPILATION_CACHE_DIR=

summarise() {  # workdir name rc start end metrics-lines-to-print
  $R python3 - "$@" >>"$OUT/runs.txt" 2>/dev/null <<'PY'
import json, sys
workdir, name, rc, start, end, lines = sys.argv[1:]
wall, lines = float(end) - float(start), int(lines)
s = json.load(open(f"{workdir}/summary.json"))
b = s.get("bottleneck", {})
print(f"{name} rc={rc} wall={wall:.1f}s sps={s['sps']:.0f} return={s['mean_return']} "
      f"checksum={s['params_checksum'][:16]} loop={s['actor_loop']} "
      f"limited_by={b.get('limited_by')} learner_wait={b.get('learner_wait_fraction', 0):.2f} "
      f"host_cpu={b.get('host_cpu_fraction', 0):.2f}")
for line in list(open(f"{workdir}/metrics.jsonl"))[:lines]:
    m = json.loads(line)
    print("   ", {k: m[k] for k in sorted(m) if "loss" in k or k in ("update", "entropy")})
PY
}

run() {  # name config [overrides...]
  local name=$1 config=$2
  shift 2
  local workdir=$WORK/$name start end rc
  rm -rf "$workdir"
  start=$(date +%s.%N)
  timeout "${RUN_TIMEOUT:-300}" $R python3 -m sebulba.main --config="$config" \
    --workdir="$workdir" --config.log.tensorboard=False --config.log.console=lines "$@" \
    >"$OUT/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  summarise "$workdir" "$name" "$rc" "$start" "$end" "${METRICS_LINES:-0}" ||
    echo "$name rc=$rc: $(tail -2 "$OUT/$name.log")" >>"$OUT/runs.txt"
}

#!/usr/bin/env bash
# Runs sebulba on a Cloud TPU VM slice: one process per TPU VM worker, each started
# with `python -m sebulba.main --distributed`, which lets jax.distributed find the
# other workers from the TPU metadata. docs/multihost.md walks through a 2-host run.
set -euo pipefail

PROJECT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly PROJECT_ROOT
# On every worker, relative to the login directory: the project copy, its virtualenv
# and one log file per run.
readonly REMOTE_PROJECT=sebulba
readonly REMOTE_VENV=sebulba-venv
readonly REMOTE_LOGS=sebulba-logs
# The TPU build of the JAX releases setup.py admits (jax and jaxlib >=0.10.0,<0.12).
readonly JAX_TPU_REQUIREMENT='jax[tpu]>=0.10.0,<0.12'
# sebulba needs Python >= 3.11; TPU VM images ship Ubuntu's older python3, so setup
# gives the virtualenv a Python of its own through uv.
readonly PYTHON_VERSION=3.11
# How long launch waits before it checks that the run is still alive: long enough for a bad
# flag or config to end it (sebulba.main refuses those in about a second), short enough to
# keep a launch quick.
readonly LAUNCH_SETTLE_S=2

usage() {
  cat <<'EOF'
usage: ./tpu.sh COMMAND [OPTIONS] [-- ARGS...]

Commands:
  check -- CONFIG [SEBULBA FLAGS...]
                               on this machine, before create: compile the run for the
                               slice TPU_ACCELERATOR_TYPE names (python -m sebulba.check:
                               memory per chip, collectives, predicted update time);
                               needs pip install -e ".[tpu-check]", no TPU, no gcloud
  create                       create the TPU VM (a slice has one VM per host)
  setup                        copy this repo (git HEAD) to every worker and install it
                               with the TPU build of JAX into ~/sebulba-venv
  launch -- CONFIG WORKDIR [SEBULBA FLAGS...]
                               start `python -m sebulba.main --distributed` on every
                               worker, detached; output appended to ~/sebulba-logs/RUN.log;
                               refuses while a run it started there is still running,
                               fails if the run exits within 2 s
  logs                         follow a run's log on one worker (default worker 0)
  stop                         send SIGTERM to the run on every worker: it saves a
                               checkpoint and exits; `launch` with the same WORKDIR resumes
  delete                       delete the TPU VM
  help                         show this text

Settings (flag, or environment variable):
  --name=NAME                  TPU_NAME              required
  --zone=ZONE                  TPU_ZONE              required
  --accelerator-type=TYPE      TPU_ACCELERATOR_TYPE  default v4-16 (2 hosts x 4 chips)
  --version=VERSION            TPU_VERSION           TPU software (runtime) version,
                                                     default tpu-ubuntu2204-base
  --project=PROJECT            TPU_PROJECT           default: gcloud's configured project
  --spot | --preemptible                             create: a spot / preemptible VM
  --config=CONFIG --workdir=WORKDIR                  launch: instead of the positionals
  --run=RUN                    TPU_RUN               launch/logs/stop: the run's name,
                                                     default the WORKDIR's last component
                                                     (logs/stop: the latest launch)
  --worker=N                                         logs: which worker (default 0)
  --dry-run                                          print every command, run nothing

Examples:
  export TPU_NAME=sebulba-v4 TPU_ZONE=us-central2-b
  ./tpu.sh check -- configs/impala_atari.py --config.mesh.learner_device_ids='(1,2,3)'
  ./tpu.sh create && ./tpu.sh setup
  ./tpu.sh launch -- configs/ppo_cartpole.py "$SHARED/cartpole" --config.seed=2
      # $SHARED: a directory every worker mounts (see docs/multihost.md)
  ./tpu.sh logs --worker=1
  ./tpu.sh delete
EOF
}

fail() {  # fail STATUS MESSAGE: one line on stderr, then exit.
  echo "tpu.sh: $2" >&2
  exit "$1"
}

# One word, quoted for any POSIX shell: bare if it is plainly safe, else in single
# quotes (which keep every character literally; an inner ' becomes '\'').
shell_quote() {
  if [[ $1 =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
    printf '%s' "$1"
  else
    local single="'"
    printf "'%s'" "${1//$single/$single\\$single$single}"
  fi
}

# A command as one shell-runnable line.
quote_words() {
  local word line=""
  for word in "$@"; do
    line+=" $(shell_quote "$word")"
  done
  printf '%s\n' "${line# }"
}

# Prints the command with a "+ " prefix; runs it unless --dry-run.
run() {
  if ((dry_run)); then
    printf '+ %s\n' "$(quote_words "$@")"
    return 0
  fi
  printf '+ %s\n' "$(quote_words "$@")" >&2
  "$@"
}

require() {  # require VALUE FLAG VARIABLE
  [[ -n $1 ]] || fail 2 "missing $2 (or set $3)"
}

# Words every gcloud call shares: which TPU, where, in which project.
tpu_target() {
  target=("$name" "--zone=$zone")
  if [[ -n $project ]]; then
    target+=("--project=$project")
  fi
}

# Runs a shell command line on the given worker(s) ("all" or an index).
on_workers() {  # on_workers WORKER COMMAND
  tpu_target
  run gcloud compute tpus tpu-vm ssh "${target[@]}" "--worker=$1" "--command=$2"
}

cmd_check() {
  run python -m sebulba.check "--config=$config" \
    "--topology=$accelerator_type" ${sebulba_args[@]+"${sebulba_args[@]}"}
}

cmd_create() {
  require "$accelerator_type" --accelerator-type TPU_ACCELERATOR_TYPE
  require "$version" --version TPU_VERSION
  tpu_target
  local create=(gcloud compute tpus tpu-vm create "${target[@]}"
    "--accelerator-type=$accelerator_type" "--version=$version")
  if [[ -n $provisioning ]]; then
    create+=("$provisioning")
  fi
  run "${create[@]}"
}

cmd_setup() {
  git -C "$PROJECT_ROOT" rev-parse --verify --quiet HEAD >/dev/null ||
    fail 2 "setup copies git HEAD, but $PROJECT_ROOT is not a git checkout with a commit"
  if [[ -n $(git -C "$PROJECT_ROOT" status --porcelain --untracked-files=no) ]]; then
    echo "tpu.sh: warning: uncommitted changes are not copied (setup sends git HEAD)" >&2
  fi
  # Only tracked files travel: no virtualenvs, runs or caches from this machine.
  tarball="${TMPDIR:-/tmp}/sebulba-$name-$$.tar.gz"
  if ((!dry_run)); then
    trap 'rm -f "$tarball"' EXIT
  fi
  run git -C "$PROJECT_ROOT" archive --format=tar.gz "--output=$tarball" HEAD
  tpu_target
  run gcloud compute tpus tpu-vm scp "$tarball" "$name:$REMOTE_PROJECT.tar.gz" \
    "${target[@]:1}" --worker=all
  local install
  install="set -euo pipefail"
  install+="; mkdir -p $REMOTE_PROJECT $REMOTE_LOGS"
  install+="; tar -xzf $REMOTE_PROJECT.tar.gz -C $REMOTE_PROJECT && rm $REMOTE_PROJECT.tar.gz"
  install+="; python3 -m pip install --user --quiet --upgrade uv"
  install+="; ~/.local/bin/uv venv --allow-existing --python $PYTHON_VERSION $REMOTE_VENV"
  install+="; ~/.local/bin/uv pip install --python $REMOTE_VENV/bin/python"
  install+=" -e ./$REMOTE_PROJECT $(shell_quote "$JAX_TPU_REQUIREMENT")"
  install+="; $REMOTE_VENV/bin/python -c $(shell_quote \
    'import jax, socket; print(socket.gethostname(), "jax", jax.__version__)')"
  on_workers all "$install"
}

# The single-quoted parts of the remote command expand on the worker.
# shellcheck disable=SC2016
cmd_launch() {
  if [[ $workdir != /* ]]; then
    echo "tpu.sh: note: WORKDIR $workdir is relative to ~/$REMOTE_PROJECT on each worker;" \
      "the workers of a multi-host slice must share it (docs/multihost.md)" >&2
  fi
  if [[ -z $run_name ]]; then
    run_name=$(basename "$workdir")
    run_name=${run_name//[^A-Za-z0-9._-]/_}
  fi
  local log="$REMOTE_LOGS/$run_name.log" main
  main=$(quote_words "../$REMOTE_VENV/bin/python" -m sebulba.main --distributed \
    "--config=$config" "--workdir=$workdir" ${sebulba_args[@]+"${sebulba_args[@]}"})
  local start
  start="set -euo pipefail; mkdir -p $REMOTE_LOGS"
  # A pid file's process is a run only while it runs sebulba.main: after a VM restart its
  # pid may belong to another program (and a zombie shows no arguments).
  start+='; is_run() { [[ $(ps -o args= -p "$1" 2>/dev/null) == *sebulba.main* ]]; }'
  # A host's TPU chips belong to one process, and a second launch of a run would take over
  # its pid file, after which `stop` cannot reach the first: refuse while any run is running.
  start+="; for pid_file in $REMOTE_LOGS/*.pid; do"
  start+=' [[ -f $pid_file && ! -L $pid_file ]] && is_run "$(< "$pid_file")" || continue'
  start+='; running=$(basename "$pid_file" .pid)'
  start+='; echo "tpu.sh: $(hostname): run $running is still running (pid $(< "$pid_file"));'
  start+=' stop it first: ./tpu.sh stop --run=$running" >&2; exit 1; done'
  start+="; cd $REMOTE_PROJECT"
  # Appended, not truncated: a resumed run keeps the log of its earlier launches.
  start+="; echo \"===== \$(date -u +%FT%TZ) tpu.sh launch $run_name =====\" >> ../$log"
  # setsid + nohup: the run outlives this ssh session (and a closed terminal).
  start+="; setsid nohup $main >> ../$log 2>&1 < /dev/null &"
  start+=" pid=\$!; echo \$pid > ../$REMOTE_LOGS/$run_name.pid"
  start+="; ln -sfn $run_name.log ../$REMOTE_LOGS/latest.log"
  start+="; ln -sfn $run_name.pid ../$REMOTE_LOGS/latest.pid"
  # A run that fails at once (a bad flag, a broken install) fails the launch, with its cause.
  start+="; sleep $LAUNCH_SETTLE_S; is_run \$pid || { echo \"tpu.sh: \$(hostname): $run_name"
  start+=" (pid \$pid) exited within ${LAUNCH_SETTLE_S}s; the end of ~/$log:\" >&2"
  start+="; tail -n 20 ../$log >&2; exit 1; }"
  start+="; echo \"\$(hostname): started $run_name (pid \$pid), log ~/$log\""
  on_workers all "$start"
}

cmd_logs() {
  local log="$REMOTE_LOGS/${run_name:-latest}.log"
  on_workers "$worker" "tail -n 200 -F $log"
}

cmd_stop() {
  local pid_file="$REMOTE_LOGS/${run_name:-latest}.pid"
  on_workers all "kill -TERM \"\$(cat $pid_file)\" && echo \"\$(hostname): SIGTERM sent\""
}

cmd_delete() {
  tpu_target
  run gcloud compute tpus tpu-vm delete "${target[@]}" --quiet
}

main() {
  name=${TPU_NAME:-}
  zone=${TPU_ZONE:-}
  accelerator_type=${TPU_ACCELERATOR_TYPE:-v4-16}
  version=${TPU_VERSION:-tpu-ubuntu2204-base}
  project=${TPU_PROJECT:-}
  run_name=${TPU_RUN:-}
  provisioning=""
  dry_run=0
  worker=0
  config=""
  workdir=""
  # bash < 4.4 (macOS's /bin/bash is 3.2) takes an empty array for an unset variable, which
  # `set -u` refuses: the arrays that may be empty expand as ${args[@]+"${args[@]}"}.
  sebulba_args=()
  local command="" positionals=()

  while (($#)); do
    local arg=$1
    shift
    # --flag VALUE is accepted as well as --flag=VALUE.
    case $arg in
      --name | --zone | --accelerator-type | --version | --project | --run | --worker | \
        --config | --workdir)
        (($#)) || fail 2 "$arg needs a value"
        arg="$arg=$1"
        shift
        ;;
    esac
    case $arg in
      --name=*) name=${arg#*=} ;;
      --zone=*) zone=${arg#*=} ;;
      --accelerator-type=*) accelerator_type=${arg#*=} ;;
      --version=*) version=${arg#*=} ;;
      --project=*) project=${arg#*=} ;;
      --run=*) run_name=${arg#*=} ;;
      --worker=*) worker=${arg#*=} ;;
      --config=*) config=${arg#*=} ;;
      --workdir=*) workdir=${arg#*=} ;;
      --spot | --preemptible)
        [[ -z $provisioning || $provisioning == "$arg" ]] ||
          fail 2 "--spot and --preemptible exclude each other"
        provisioning=$arg
        ;;
      --dry-run) dry_run=1 ;;
      -h | --help) command=help ;;
      --)
        positionals+=("$@")
        break
        ;;
      -*) fail 2 "unknown option $arg (see ./tpu.sh help)" ;;
      *)
        if [[ -z $command ]]; then
          command=$arg
        else
          positionals+=("$arg")
        fi
        ;;
    esac
  done

  case $command in
    help)
      usage
      return 0
      ;;
    "")
      usage >&2
      exit 2
      ;;
    check | create | setup | launch | logs | stop | delete) ;;
    *) fail 2 "unknown command '$command' (see ./tpu.sh help)" ;;
  esac
  if [[ $command == launch ]]; then
    # Positionals fill CONFIG and WORKDIR unless flags gave them; the rest is sebulba's.
    if [[ -z $config && ${#positionals[@]} -gt 0 ]]; then
      config=${positionals[0]}
      positionals=("${positionals[@]:1}")
    fi
    if [[ -z $workdir && ${#positionals[@]} -gt 0 ]]; then
      workdir=${positionals[0]}
      positionals=("${positionals[@]:1}")
    fi
    sebulba_args=(${positionals[@]+"${positionals[@]}"})
    [[ -n $config && -n $workdir ]] ||
      fail 2 "usage: ./tpu.sh launch [OPTIONS] -- CONFIG WORKDIR [SEBULBA FLAGS...]"
  elif [[ $command == check ]]; then
    if [[ -z $config && ${#positionals[@]} -gt 0 ]]; then
      config=${positionals[0]}
      positionals=("${positionals[@]:1}")
    fi
    sebulba_args=(${positionals[@]+"${positionals[@]}"})
    [[ -n $config ]] || fail 2 "usage: ./tpu.sh check [OPTIONS] -- CONFIG [SEBULBA FLAGS...]"
    # Local: needs neither a TPU VM's name and zone nor gcloud.
    cmd_check
    return
  elif ((${#positionals[@]})); then
    fail 2 "$command takes no arguments, got: ${positionals[*]}"
  fi
  [[ $worker =~ ^[0-9]+$ ]] || fail 2 "--worker=$worker must be a worker index (0, 1, ...)"
  # The run name goes into remote file names unquoted.
  [[ -z $run_name || $run_name =~ ^[A-Za-z0-9._-]+$ ]] ||
    fail 2 "--run=$run_name: use letters, digits, '.', '_' and '-' only (it names the log file)"
  require "$name" --name TPU_NAME
  require "$zone" --zone TPU_ZONE
  if ((!dry_run)) && ! command -v gcloud >/dev/null; then
    fail 2 "gcloud not found: install the Google Cloud CLI (or use --dry-run)"
  fi
  "cmd_$command"
}

main "$@"

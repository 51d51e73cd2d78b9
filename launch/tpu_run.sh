#!/usr/bin/env bash
# Runs prover-train on every worker of a Cloud TPU VM slice: (create) -> copy -> install -> train
# -> (delete). See launch/README.md; `launch/tpu_run.sh --help` for the flags.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: launch/tpu_run.sh --tpu_name=NAME --config=PATH[:ARG] --workdir=DIR [options]

Runs ONE `prover-train --config=PATH[:ARG] --workdir=DIR` per worker of a Cloud TPU VM slice, all
with the same flags. The processes find each other through jax.distributed (auto-detected on TPU
VMs: PROVER_DISTRIBUTED=1); the train state is sharded over every chip of the slice, each worker
plays its share of the step's task groups on its own chips, and process 0 writes metrics, summary
and exports. The workdir must be one folder every worker sees: gs://BUCKET/... .

Required (flag, else environment variable):
  --tpu_name NAME          TPU VM name                                  [$TPU_NAME]
  --config PATH[:ARG]      config file relative to --repo_dir           [$PROVER_CONFIG]
                           e.g. configs/qwen3_5.py:2B,alfworld,v6e-8
  --workdir DIR            run folder, e.g. gs://BUCKET/runs/alfworld   [$PROVER_WORKDIR]
Options:
  --zone ZONE              default: gcloud's compute/zone               [$TPU_ZONE]
  --project PROJECT        default: gcloud's core/project               [$TPU_PROJECT]
  --accelerator_type TYPE  e.g. v6e-8, v5p-16; needed by --create       [$TPU_ACCELERATOR_TYPE]
  --runtime_version V      TPU software version for --create; default by type:
                           v6e v2-alpha-tpuv6e, v5p v2-alpha-tpuv5, v5e v2-alpha-tpuv5-lite,
                           v4 tpu-ubuntu2204-base                       [$TPU_RUNTIME_VERSION]
  --repo_dir DIR           local source tree copied to the workers      [$PROVER_REPO_DIR]
                           default: the repository holding this script
  --extra_flags FLAGS      more prover-train flags, as words of the remote shell command
                           e.g. "--config.train.steps=50"               [$PROVER_EXTRA_FLAGS]
  --env_file FILE          KEY=VALUE lines exported on every worker before training
                           (OPENAI_API_KEY, QWEN_PATH, ALFWORLD_DATA, ...)  [$PROVER_ENV_FILE]
  --hf_model REPO_ID       download this Hugging Face model on every worker and train from it
                           (sets --config.model.path)                   [$PROVER_HF_MODEL]
  --extras LIST            prover_jax extras to install, e.g. alfworld (the default when the
                           config names "alfworld" or is qwen3_5.py without a benchmark; serve added
                           when qwen3_5.py serves a judge, SIZE,BENCHMARK,SLICE,JUDGE; "none" for none)  [$PROVER_EXTRAS]
  --python VERSION         Python of the workers' venv (default 3.12)   [$PROVER_PYTHON]
  --create                 create the TPU VM first
  --delete_after           delete the TPU VM at the end (also after a failure)
  --dry_run                print every command instead of running it
  -h, --help               this help
Flags take a value as --flag=VALUE or --flag VALUE. Exit status: 2 for usage errors, else the
first failing command's.
EOF
}

die() {
  echo "tpu_run.sh: $*" >&2
  echo "Run launch/tpu_run.sh --help for usage." >&2
  exit 2
}

# A word the shell reads back as $1 (single-quoted unless it is plainly safe).
quote() {
  case "$1" in
    '' | *[!A-Za-z0-9_./:=@%+,-]*) printf "'%s'" "${1//\'/\'\\\'\'}" ;;
    *) printf '%s' "$1" ;;
  esac
}

# Runs a command, or with --dry_run prints it (one line, copy-pasteable).
run() {
  if ((DRY_RUN)); then
    local out="+" word
    for word in "$@"; do out+=" $(quote "$word")"; done
    echo "$out"
  else
    "$@"
  fi
}

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TPU_NAME="${TPU_NAME:-}"
ZONE="${TPU_ZONE:-}"
PROJECT="${TPU_PROJECT:-}"
ACCELERATOR_TYPE="${TPU_ACCELERATOR_TYPE:-}"
RUNTIME_VERSION="${TPU_RUNTIME_VERSION:-}"
CONFIG="${PROVER_CONFIG:-}"
WORKDIR="${PROVER_WORKDIR:-}"
REPO_DIR="${PROVER_REPO_DIR:-$(dirname "$script_dir")}"
EXTRA_FLAGS="${PROVER_EXTRA_FLAGS:-}"
ENV_FILE="${PROVER_ENV_FILE:-}"
HF_MODEL="${PROVER_HF_MODEL:-}"
EXTRAS="${PROVER_EXTRAS:-}"
PYTHON_VERSION="${PROVER_PYTHON:-3.12}"
CREATE=0
DRY_RUN=0
DELETE_AFTER=0

while (($# > 0)); do
  arg="$1"
  shift
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    --create) CREATE=1; continue ;;
    --dry_run) DRY_RUN=1; continue ;;
    --delete_after) DELETE_AFTER=1; continue ;;
    --*=*) name="${arg%%=*}"; value="${arg#*=}" ;;
    --*)
      (($# > 0)) || die "$arg needs a value"
      name="$arg"; value="$1"; shift ;;
    *) die "unexpected argument '$arg'" ;;
  esac
  case "$name" in
    --tpu_name) TPU_NAME="$value" ;;
    --zone) ZONE="$value" ;;
    --project) PROJECT="$value" ;;
    --accelerator_type) ACCELERATOR_TYPE="$value" ;;
    --runtime_version) RUNTIME_VERSION="$value" ;;
    --config) CONFIG="$value" ;;
    --workdir) WORKDIR="$value" ;;
    --repo_dir) REPO_DIR="$value" ;;
    --extra_flags) EXTRA_FLAGS="$value" ;;
    --env_file) ENV_FILE="$value" ;;
    --hf_model) HF_MODEL="$value" ;;
    --extras) EXTRAS="$value" ;;
    --python) PYTHON_VERSION="$value" ;;
    *) die "unknown flag $name" ;;
  esac
done

[[ -n "$TPU_NAME" ]] || die "missing --tpu_name (or \$TPU_NAME)"
[[ -n "$CONFIG" ]] || die "missing --config (or \$PROVER_CONFIG), e.g. configs/qwen3_5.py:2B,alfworld,v6e-8"
[[ -n "$WORKDIR" ]] || die "missing --workdir (or \$PROVER_WORKDIR), e.g. gs://BUCKET/runs/NAME"
[[ -f "$REPO_DIR/setup.py" ]] || die "--repo_dir '$REPO_DIR' is not the prover_jax source tree"
[[ "$CONFIG" != /* && -f "$REPO_DIR/${CONFIG%%:*}" ]] ||
  die "--config '${CONFIG%%:*}' is not a file under --repo_dir (give it relative to the repository)"
[[ -z "$ENV_FILE" || -f "$ENV_FILE" ]] || die "--env_file '$ENV_FILE' does not exist"
[[ "$WORKDIR" == gs://* ]] || echo "tpu_run.sh: warning: --workdir '$WORKDIR' is not gs://; on a" \
  "multi-host slice every worker would write its own copy and a restart could not resume" >&2
if [[ -z "$EXTRAS" ]]; then
  extras=()
  # alfworld named, or configs/qwen3_5.py with no benchmark (alfworld is its default)
  if [[ "$(basename "$CONFIG")" =~ alfworld|^qwen3_5\.py(:[^,]*)?$ ]]; then extras+=(alfworld); fi
  # a judge served beside training (configs/qwen3_5.py:SIZE,BENCHMARK,SLICE,JUDGE) runs prover-serve's app
  if [[ "$(basename "$CONFIG")" =~ ^qwen3_5\.py:[^,]*,[^,]*,[^,]*,[^,]+$ ]]; then extras+=(serve); fi
  EXTRAS=$(IFS=,; echo "${extras[*]:-none}")
fi
[[ "$EXTRAS" =~ ^[a-z0-9_,-]+$ ]] || die "--extras '$EXTRAS' is not a comma-separated list of extras"
[[ "$PYTHON_VERSION" =~ ^[0-9]+(\.[0-9]+)*$ ]] || die "--python '$PYTHON_VERSION' is not a version"
[[ -z "$HF_MODEL" || "$HF_MODEL" =~ ^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$ ]] ||
  die "--hf_model '$HF_MODEL' is not a Hugging Face repo id (OWNER/NAME)"
if ((CREATE)); then
  [[ -n "$ACCELERATOR_TYPE" ]] || die "--create needs --accelerator_type (e.g. v6e-8)"
  if [[ -z "$RUNTIME_VERSION" ]]; then
    case "$ACCELERATOR_TYPE" in
      v6e-*) RUNTIME_VERSION=v2-alpha-tpuv6e ;;
      v5p-*) RUNTIME_VERSION=v2-alpha-tpuv5 ;;
      v5litepod-* | v5e-*) RUNTIME_VERSION=v2-alpha-tpuv5-lite ;;
      v4-*) RUNTIME_VERSION="tpu-ubuntu2204-base" ;;
      *) die "no default --runtime_version for accelerator type '$ACCELERATOR_TYPE'" ;;
    esac
  fi
fi
((DRY_RUN)) || command -v gcloud >/dev/null || die "gcloud not found (install the Google Cloud SDK)"

tpu=(gcloud compute tpus tpu-vm)
where=()
[[ -z "$ZONE" ]] || where+=("--zone=$ZONE")
[[ -z "$PROJECT" ]] || where+=("--project=$PROJECT")
# "${where[@]+...}": an empty array is an unbound variable to `set -u` in bash < 4.4 (macOS).
on_workers() { run "${tpu[@]}" ssh "$TPU_NAME" --worker=all "${where[@]+"${where[@]}"}" --command="$1"; }

tmpdir=""
cleanup() {
  local rc=$?
  trap - EXIT
  if ((DELETE_AFTER)); then
    echo "tpu_run.sh: deleting TPU VM $TPU_NAME" >&2
    run "${tpu[@]}" delete "$TPU_NAME" "${where[@]+"${where[@]}"}" --quiet || {
      local del=$?
      ((rc)) || rc=$del
    }
  fi
  [[ -z "$tmpdir" ]] || rm -rf "$tmpdir"
  exit "$rc"
}
trap cleanup EXIT

echo "tpu_run.sh: $CONFIG on $TPU_NAME, workdir $WORKDIR" >&2

# 1. The VM.
if ((CREATE)); then
  run "${tpu[@]}" create "$TPU_NAME" "${where[@]+"${where[@]}"}" \
    --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION"
fi

# 2. The source: a tarball of the local tree (uncommitted edits included; no git credentials or
#    network access to the repository needed on the workers), unpacked fresh on every worker.
if ((DRY_RUN)); then
  tarball="${TMPDIR:-/tmp}/prover_src.tgz"
else
  tmpdir="$(mktemp -d)"
  tarball="$tmpdir/prover_src.tgz"
fi
run tar -C "$REPO_DIR" --exclude=.git --exclude=.venv --exclude=__pycache__ --exclude='*.egg-info' \
  --exclude=runs -czf "$tarball" .
run "${tpu[@]}" scp "$tarball" "$TPU_NAME:prover_src.tgz" --worker=all "${where[@]+"${where[@]}"}"
if [[ -n "$ENV_FILE" ]]; then
  run "${tpu[@]}" scp "$ENV_FILE" "$TPU_NAME:prover_env.sh" --worker=all "${where[@]+"${where[@]}"}"
fi

# 3. Install: a uv-managed Python (TPU VM images ship 3.10; prover_jax needs >= 3.11) and a venv
#    with the package (editable, with its extras) and jax[tpu].
# shellcheck disable=SC2088  # ~ expands on the worker
package="~/prover_jax"
if [[ "$EXTRAS" == none ]]; then package+="'[gcs]'"; else package+="'[gcs,$EXTRAS]'"; fi
install="set -euo pipefail; rm -rf ~/prover_jax && mkdir -p ~/prover_jax"
install+=" && tar -xzf ~/prover_src.tgz -C ~/prover_jax"
install+=" && { [ -x ~/.local/bin/uv ] || curl -LsSf https://astral.sh/uv/install.sh | sh; }"
install+=" && ~/.local/bin/uv venv --allow-existing --python $PYTHON_VERSION ~/prover_venv"
install+=" && ~/.local/bin/uv pip install --python ~/prover_venv/bin/python -e $package 'jax[tpu]'"
model_flag=""
if [[ -n "$HF_MODEL" ]]; then
  install+=" && ~/prover_venv/bin/hf download $HF_MODEL --local-dir ~/models/$HF_MODEL"
  # shellcheck disable=SC2016  # $HOME expands on the worker
  model_flag=' --config.model.path="$HOME/models/'"$HF_MODEL"'"'
fi
on_workers "$install"

# 4. Train: one process per worker, started at once with the same command; output streams here
#    and is kept in ~/prover_train.log there.
train="set -o pipefail; cd ~/prover_jax"
[[ -z "$ENV_FILE" ]] || train+=" && set -a && . ~/prover_env.sh && set +a"
train+=" && PROVER_DISTRIBUTED=1 ~/prover_venv/bin/prover-train --config=$(quote "$CONFIG")"
train+=" --workdir=$(quote "$WORKDIR")"
train+="$model_flag${EXTRA_FLAGS:+ $EXTRA_FLAGS} 2>&1 | tee ~/prover_train.log"
on_workers "$train"

echo "tpu_run.sh: done; workdir: $WORKDIR"

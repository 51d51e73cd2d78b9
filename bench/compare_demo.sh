#!/usr/bin/env bash
# The paper's comparison on the demo setting (household pick_and_place, the demo policy after SFT):
# every credit method and the random-judge ablation, 3 seeds, 60 RL steps, held-out evaluations of
# 200 tasks every 20 steps. Resumable: re-run the same command after an interruption.
# The second setting, with more pivots: CONFIG=configs/demo_mixed.py (SFT ~14 min per seed, RL runs
# ~6-15 min each, ~4 h in all; the demo: ~7-10 min per run, ~3 h).
#   [CONFIG=configs/demo.py] bash bench/compare_demo.sh [WORKDIR] [extra prover-compare flags]
# Later flags win: `--methods=grpo,prover` runs a subset first (same folders). One run at a time:
# on 2 cores a demo step took ~8 s alone and ~20 s each with two runs at once.
# The record of finished runs (bench/results/compare_demo/, written with --export) seeds a workdir:
#   cp -r bench/results/compare_demo W && bash bench/compare_demo.sh W   # skips the recorded runs
# The learning-rate probe (bench/results/compare_demo_lr):
#   bash bench/compare_demo.sh W --methods=grpo,grpo:optim.learning_rate=5e-5,grpo:optim.learning_rate=1e-5
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-runs/compare_$(basename "${CONFIG:-configs/demo.py}" .py)}
shift || true
exec .venv/bin/prover-compare --config="${CONFIG:-configs/demo.py}" --workdir="$W" --seeds=3 \
    --methods=grpo,budget_grpo,gigpo,spo_chain,critic,prover,prover:judge=random \
    --config.train.steps=60 --config.train.eval_every=20 --parallel=1 "$@"

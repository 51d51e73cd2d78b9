#!/usr/bin/env bash
# Compiles every shipped pod layout (and the feature variants of bench/RESULTS.md) with prover-aot on
# this host, one after another (each takes minutes on 2 CPU cores), appending JSON lines to OUT.
#   bench/aot_layouts.sh [OUT=bench/aot_layouts.jsonl]      then: python bench/aot_table.py OUT
set -euo pipefail
out="${1:-bench/aot_layouts.jsonl}"
q=configs/qwen3_5.py
run() {  # name config [flags...]
  local name=$1 cfg=$2; shift 2
  prover-aot --config="$cfg" "$@" | sed "s/^{/{\"run\": \"$name\", /" >> "$out"
}
run 2B-v6e-8 "$q:2B,alfworld,v6e-8"
run 4B-v5p-16 "$q:4B,alfworld,v5p-16" --fn=train_step,generate
run 2B-v6e-8-unrolled "$q:2B,alfworld,v6e-8" --fn=train_step --config.model.scan_layers=False
run 2B-v5p-8 "$q:2B,alfworld,v5p-8" --fn=train_step,generate
run 4B-v6e-16 "$q:4B,alfworld,v6e-16" --fn=train_step,generate
run 9B-v5p-32 "$q:9B,alfworld,v5p-32" --fn=train_step,generate
# dense Qwen3 (the second model family) in the 2B v6e-8 layout, its architecture named by family and size
run qwen3-1.7B-v6e-8 "$q:2B,alfworld,v6e-8" --fn=train_step,generate --config.model.family=qwen3 \
    --config.model.size=1.7B
run 2B-v6e-8-chunk16-fp32 "$q:2B,alfworld,v6e-8" --fn=train_step --config.model.gdn_chunk=16 \
    --config.model.gdn_matmul_dtype=float32
run 2B-v6e-8-dense "$q:2B,alfworld,v6e-8" --fn=train_step --config.model.attention=dense
run 2B-v6e-8-no-remat "$q:2B,alfworld,v6e-8" --fn=train_step --config.train.remat=none
# rows per chip and remat on 2B v6e-8 (the update issue's item 6; bench/RESULTS.md, "v6e: rows per chip")
run 2B-v6e-8-micro16 "$q:2B,alfworld,v6e-8" --fn=train_step --config.train.micro_batch_size=16
run 2B-v6e-8-micro32 "$q:2B,alfworld,v6e-8" --fn=train_step --config.train.micro_batch_size=32
run 2B-v6e-8-dots "$q:2B,alfworld,v6e-8" --fn=train_step --config.train.remat=dots
run 2B-v6e-8-micro32-dots "$q:2B,alfworld,v6e-8" --fn=train_step --config.train.micro_batch_size=32 \
    --config.train.remat=dots
run 2B-v6e-8-micro4 "$q:2B,alfworld,v6e-8" --fn=train_step --config.train.micro_batch_size=4
# LoRA (model.lora, rank 16, bf16 frozen base): 9B on one v6e-8 host (README, "LoRA"), as shipped
# (mesh 1x4x2) and at tensor 1, where the engine's whole weights leave 3% of HBM with the update
run 9B-v6e-8-lora "$q:9B,alfworld,v6e-8-lora" --fn=train_step,generate
run 9B-v6e-8-lora-tensor1 "$q:9B,alfworld,v6e-8-lora" --fn=train_step,generate --config.mesh.fsdp=8 \
    --config.mesh.tensor=1
# FSDP gathers and the vocab projection (bench/RESULTS.md, "FSDP gathers whole, logits unchunked"): each
# train step as the compiler's default windowed einsum streams FSDP shards (named on, overriding the flags
# importing prover_jax sets) with 1024-position logit chunks (the layouts before), then with the flags
# and 1024-position chunks; the shipped rows above have both changes where they apply.
W="--xla_tpu_enable_windowed_einsum_for_all_gather=true --xla_tpu_enable_windowed_einsum_for_reduce_scatter=true"
for L in 2B,v6e-8 4B,v6e-16 2B,v5p-8 4B,v5p-16 9B,v5p-32; do
  name="${L%,*}-${L#*,}" cfg="$q:${L%,*},alfworld,${L#*,}"
  LIBTPU_INIT_ARGS="$W" run "$name-windowed" "$cfg" --fn=train_step --config.train.logprob_chunk=1024
  run "$name-chunk1024" "$cfg" --fn=train_step --config.train.logprob_chunk=1024
done
LIBTPU_INIT_ARGS="$W" run 9B-v6e-8-lora-windowed "$q:9B,alfworld,v6e-8-lora" --fn=train_step \
    --config.train.logprob_chunk=1024
run 9B-v6e-8-lora-chunk1024 "$q:9B,alfworld,v6e-8-lora" --fn=train_step --config.train.logprob_chunk=1024
# rows per chip and remat=dots again, as shipped now (FSDP gathered whole, logits unchunked)
run 2B-v6e-8-micro16-gathered "$q:2B,alfworld,v6e-8" --fn=train_step --config.train.micro_batch_size=16
run 2B-v6e-8-dots-gathered "$q:2B,alfworld,v6e-8" --fn=train_step --config.train.remat=dots
# packed rows (bench/RESULTS.md, "Packed pod layouts"): every micro-batch bucket of the layouts that pack
# by default, then one episode per row; --fill weighs each by the scripted ALFWorld steps of
# bench/packing_fill.py (seconds per 1k real tokens, the buckets' padding waste)
F=bench/results/packing_fill/qwen3_5_2b_alfworld_scripted.jsonl
for L in 2B,v6e-8 4B,v5p-16; do
  name="${L%,*}-${L#*,}" cfg="$q:${L%,*},alfworld,${L#*,}"
  run "$name-packed" "$cfg" --fn=train_step --fill=$F
  run "$name-unpacked" "$cfg" --fn=train_step --fill=$F --config.train.max_tokens_per_row=0
done
# the memory check of packing on the other TPU layouts: their largest bucket (a step's episodes one per row)
for L in 2B,v5p-8 4B,v6e-16 9B,v5p-32 9B,v6e-8-lora; do
  name="${L%,*}-${L#*,}" cfg="$q:${L%,*},alfworld,${L#*,}"
  run "$name-packed-largest" "$cfg" --fn=train_step --config.train.max_tokens_per_row=4096 \
      --config.train.packed_buckets="(128,)"
done

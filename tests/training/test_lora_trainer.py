"""LoRA in the trainer: only the adapters are trained and checkpointed, the sampler decodes the merged
weights (its log-probs are the trainer's), a restart restores the adapters, export merges them."""

import os

import jax
import numpy as np
from flax import nnx

from prover_jax.models import qwen3_5
from prover_jax.models.lora import adapter_count
from prover_jax.training import trainer as trainer_lib
from prover_jax.training.batch import pack
from prover_jax.training.logprobs import make_logprob_fn

from helpers.credit import signed_advantages
from helpers.demo_config import trainer_config


def lora_config():
    c = trainer_config()
    c.credit.method = "grpo"
    c.model.lora.rank = 4
    c.model.lora.alpha = 8.0
    c.optim.learning_rate = 3e-2
    c.loss.kl_coef = 0.1  # the reference: the policy after SFT (base + SFT adapters), merged
    return c


def test_lora_trains_adapters_only_and_the_sampler_decodes_the_merged_weights(tmp_path):
    c = lora_config()
    workdir = str(tmp_path / "lora")
    t = trainer_lib.Trainer(c, workdir)
    try:
        n_pairs = adapter_count(t.state.params)
        assert n_pairs > 0 and len(jax.tree.leaves(t.state.params)) == 2 * n_pairs  # adapters only
        base = [np.asarray(x).copy() for x in jax.tree.leaves(t.run.policy.frozen)]
        t.run_sft()
        t.run.credit.assign = signed_advantages(t.run.credit.assign)
        row = t.rl_step()
        assert row["applied"] and np.isfinite(row["loss"])
        assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(base, jax.tree.leaves(t.run.policy.frozen)))
        merged = t.run.policy.weights(t.state.params)
        assert any(not np.array_equal(a, np.asarray(b)) for a, b in zip(base, jax.tree.leaves(merged)))
        # the next batch is sampled from the merged weights: its log-probs are the trainer's
        selected, _ = t._collect()
        trajs = selected.played
        rows = pack(trajs, [np.zeros(len(x.tokens), np.float32) for x in trajs], len(trajs))
        got = np.asarray(make_logprob_fn(t.run.policy.plain)(merged, rows["tokens"][0], rows["valid"][0]))
        m = rows["loss_mask"][0]
        assert np.abs(got[m] - rows["old_logprobs"][0][m]).max() < 1e-4
        adapters = [np.asarray(x).copy() for x in jax.tree.leaves(t.state.params)]
        t.save()
        t.export_hf(str(tmp_path / "hf"))
        base_model = nnx.merge(t.run.policy.plain, t.run.policy.frozen)
        qwen3_5.save_hf(base_model, str(tmp_path / "base"))
        t.run.tokenizer.save_pretrained(str(tmp_path / "base"))
    finally:
        t.close()
    # the checkpoint holds the adapters and their optimizer state, not the base
    ckpt_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(workdir, "checkpoints"))
                     for f in fs)
    base_bytes = sum(a.nbytes for a in base)
    assert ckpt_bytes < base_bytes, (ckpt_bytes, base_bytes)
    t = trainer_lib.Trainer(c, workdir)
    try:
        assert t.restored and t.step == 1
        for a, b in zip(adapters, jax.tree.leaves(t.state.params)):
            np.testing.assert_array_equal(a, np.asarray(b))
        assert t.rl_step()["applied"]
    finally:
        t.close()
    exported = qwen3_5.load_hf(str(tmp_path / "hf"))  # the merged policy, a plain model
    _, params = nnx.split(exported, nnx.Param)
    for a, b in zip(jax.tree.leaves(merged), jax.tree.leaves(params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)

    # prover-convert --out_peft: PEFT on transformers' base model gives the merged policy's logits
    import subprocess
    import sys

    import torch
    import transformers
    from peft import PeftModel

    subprocess.run([sys.executable, "-m", "prover_jax.convert.cli", f"--ckpt={workdir}", "--step=1",
                    f"--out_peft={tmp_path / 'peft'}"], check=True, capture_output=True)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "base"), dtype=torch.float32).eval()
    tok = np.random.default_rng(0).integers(0, exported.config.vocab_size, (2, 12))
    with torch.no_grad():
        ref = PeftModel.from_pretrained(hf, str(tmp_path / "peft")).eval()(torch.tensor(tok)).logits.numpy()
    np.testing.assert_allclose(ref, np.asarray(exported(tok)), atol=5e-5)


def test_without_sft_the_kl_reference_is_the_frozen_base(tmp_path):
    c = lora_config()
    c.sft.steps = 0
    t = trainer_lib.Trainer(c, str(tmp_path / "ref"))
    try:
        assert t.ref_params is t.run.policy.frozen and t.run.ref_ckpts is None  # no second copy of the base
        row = t.rl_step()
        assert row["applied"] and row["kl"] == 0.0  # B = 0: the policy is the base at the first step
        row = t.rl_step()
        assert row["kl"] > 0.0
    finally:
        t.close()

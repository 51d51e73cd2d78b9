"""LoRA through qwix (models/lora.py): a zero adapter is the base model, gradients reach the adapters
only, merged weights decode like the adapted model, and PEFT loads our adapter onto transformers'
model with the same logits."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.models import qwen3_5
from prover_jax.models.lora import LoraSpec, adapter_count, apply_lora, merge_weights, split_lora, write_peft
from prover_jax.training.config import default_config
from prover_jax.training.optim import make_optimizer
from prover_jax.training.step import grpo_objective, init_train_state, make_train_step

from helpers.tiny import tiny_config, tiny_model

SPEC = LoraSpec(rank=4, alpha=8.0)
TOKENS = np.random.default_rng(0).integers(0, 64, (2, 9)).astype(np.int32)


def randomize_b(adapters, seed=1, scale=0.1):
    """B = 0 makes an adapter a no-op: give every B a random value."""
    key = jax.random.PRNGKey(seed)
    flat = []
    for path, v in nnx.to_flat_state(adapters):
        if str(path[-1]).endswith("_lora_b"):
            key, k = jax.random.split(key)
            v = v.replace(scale * jax.random.normal(k, v.shape, v[...].dtype))
        flat.append((path, v))
    return nnx.from_flat_state(flat)


def test_zero_adapter_is_the_base_and_merged_weights_are_the_adapted_model():
    base = tiny_model(tiny_config())
    want = np.asarray(base(jnp.asarray(TOKENS)))
    plain_graphdef, plain_params = nnx.split(base, nnx.Param)
    lm = apply_lora(base, SPEC)
    graphdef, adapters, frozen = split_lora(lm)
    # one (A, B) pair per targeted projection: attention q/k/v/o, GDN qkv/z/out, MLP gate/up/down
    assert adapter_count(adapters) == 3 + 4 + 3 * 2
    np.testing.assert_array_equal(np.asarray(nnx.merge(graphdef, adapters, frozen)(jnp.asarray(TOKENS))), want)
    moved = randomize_b(adapters)
    adapted = np.asarray(nnx.merge(graphdef, moved, frozen)(jnp.asarray(TOKENS)))
    assert np.abs(adapted - want).max() > 1e-2  # the adapter is live in the forward
    merged = jax.jit(lambda b, a: merge_weights(b, a, SPEC))(frozen, moved)
    plain = nnx.merge(plain_graphdef, merged)
    np.testing.assert_allclose(np.asarray(plain(jnp.asarray(TOKENS))), adapted, atol=2e-6)
    # the merged plain model decodes like the adapted one (cached prefill, then one token)
    for m in (plain, nnx.merge(graphdef, moved, frozen)):
        cache = m.init_cache(2, 12)
        m(jnp.asarray(TOKENS[:, :8]), cache=cache)
    assert jax.tree.structure(merged) == jax.tree.structure(plain_params)


def test_adapted_projections_keep_the_compute_dtype():
    """The fp32 adapters' delta is added in fp32 but each projection returns the bf16 compute dtype, as
    the plain model's do: the residual stream and attention stay bf16 (cuDNN attention takes no fp32)."""
    base = tiny_model(tiny_config(), dtype=jnp.bfloat16)
    plain_graphdef, _ = nnx.split(base, nnx.Param)
    graphdef, adapters, frozen = split_lora(apply_lora(base, SPEC))
    moved = randomize_b(adapters)
    lm = nnx.merge(graphdef, moved, frozen)
    assert lm.hidden(jnp.asarray(TOKENS)).dtype == jnp.bfloat16
    plain = nnx.merge(plain_graphdef, merge_weights(frozen, moved, SPEC))
    np.testing.assert_allclose(np.asarray(lm(jnp.asarray(TOKENS))), np.asarray(plain(jnp.asarray(TOKENS))),
                               atol=0.1)


def test_gradients_reach_the_adapters_only():
    lm = apply_lora(tiny_model(tiny_config()), SPEC)
    graphdef, adapters, frozen = split_lora(lm)
    frozen_before = jax.tree.map(np.asarray, frozen)
    adapters_before = jax.tree.map(np.asarray, adapters)  # the step donates the state's buffers
    opt = make_optimizer(default_config().optim)
    state = init_train_state(lm, opt, params=adapters)
    assert jax.tree.structure(state.params) == jax.tree.structure(adapters)
    rng = np.random.default_rng(1)
    mask = np.ones((1, 4, 9), bool)
    mask[..., :3] = False
    batch = dict(tokens=TOKENS[None, :, :].repeat(2, 1)[:, :4], valid=np.ones((1, 4, 9), bool), loss_mask=mask,
                 advantages=(rng.normal(0, 1, (1, 4, 9)) * mask).astype(np.float32),
                 old_logprobs=np.full((1, 4, 9), -4.0, np.float32))
    step = make_train_step(graphdef, grpo_objective(default_config().loss), opt)
    new, m = step(state, {k: jnp.asarray(v) for k, v in batch.items()}, frozen)
    assert int(new.step) == 1 and np.isfinite(float(m["loss"]))
    changed = [not np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(adapters_before))]
    assert any(changed)  # B moves at the first step (A's gradient is 0 while B = 0)
    for a, b in zip(jax.tree.leaves(frozen), jax.tree.leaves(frozen_before)):
        np.testing.assert_array_equal(np.asarray(a), b)  # the base is an input, never updated


def test_peft_loads_our_adapter_onto_transformers(tmp_path):
    pytest.importorskip("peft")
    from peft import PeftModel

    from helpers import hf as F

    hf = F.make_text_checkpoint(str(tmp_path / "base"), [qwen3_5.LINEAR, qwen3_5.FULL], tied=True)
    ours = qwen3_5.load_hf(str(tmp_path / "base"))
    tok = np.random.RandomState(1).randint(0, F.TINY["vocab_size"], (2, 11)).astype(np.int32)
    lm = apply_lora(ours, SPEC)
    graphdef, adapters, frozen = split_lora(lm)
    adapters = randomize_b(adapters, scale=0.2)
    got = np.asarray(nnx.merge(graphdef, adapters, frozen)(jnp.asarray(tok)))
    assert np.abs(got - F.hf_logits(hf, tok)).max() > 0.1  # the adapter matters
    write_peft(str(tmp_path / "adapter"), adapters, SPEC, base_model=str(tmp_path / "base"),
               path_to_hf=qwen3_5.path_to_hf)
    assert os.path.exists(tmp_path / "adapter" / "adapter_config.json")
    peft_model = PeftModel.from_pretrained(hf, str(tmp_path / "adapter")).eval()  # injects into `hf`
    ref = F.hf_logits(peft_model, tok)
    np.testing.assert_allclose(got, ref, atol=2e-5)


def test_lora_config_is_checked():
    c = default_config().model.lora
    assert LoraSpec.from_config(c) is None  # rank 0: off
    c.rank = 4
    c.targets = ("q_proj", "embed_tokens")
    with pytest.raises(ValueError, match="model.lora.targets"):
        LoraSpec.from_config(c)
    c.targets = ("q_proj",)
    c.dropout = 0.1  # qwix would draw it from module rngs the jitted step does not carry: refused up front
    with pytest.raises(ValueError, match="model.lora.dropout = 0.1: adapter dropout is not supported"):
        LoraSpec.from_config(c)

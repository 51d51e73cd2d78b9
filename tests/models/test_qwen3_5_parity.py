"""Logit parity with transformers' Qwen3.5 (torch CPU, fp32) on tiny random checkpoints."""

import jax.numpy as jnp
import numpy as np
import pytest

from prover_jax.models import qwen3_5

from helpers import hf as F

L, A = "linear_attention", "full_attention"
TOL = 2e-4

# name -> (layer_types, tied, overrides, sequence length)
CASES = {
    "tied_gqa2_hv2_T70": ([L, L, L, A], True, {}, 70),
    "untied_mha_hv1_T33": ([L, A, L, A], False,
                           dict(num_key_value_heads=4, linear_num_value_heads=2), 33),
    "tied_gqa4_hv4_T130": ([A, L, L, L, A], True,
                           dict(num_attention_heads=8, num_key_value_heads=2, head_dim=8,
                                linear_num_key_heads=1, linear_num_value_heads=4), 130),
    "untied_linear_only_T65": ([L, L], False, dict(linear_key_head_dim=8, linear_value_head_dim=16), 65),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_transformers(name, tmp_path):
    layer_types, tied, over, T = CASES[name]
    hf = F.make_text_checkpoint(tmp_path, layer_types, tied=tied, **over)
    model = qwen3_5.load_hf(str(tmp_path))
    tokens = np.random.RandomState(1).randint(0, F.TINY["vocab_size"], (2, T)).astype(np.int32)
    ours = np.asarray(model(jnp.asarray(tokens)))
    ref = F.hf_logits(hf, tokens)
    diff = float(np.abs(ours - ref).max())
    print(f"parity {name}: max |dlogit| = {diff:.2e}")
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert diff <= TOL


def test_padded_batch_matches_transformers_and_unpadded(tmp_path):
    hf = F.make_text_checkpoint(tmp_path, [L, L, A, L, A], tied=False)
    model = qwen3_5.load_hf(str(tmp_path))
    rng = np.random.RandomState(2)
    lengths = [80, 45, 7]
    T = max(lengths)
    tokens = np.zeros((3, T), np.int32)
    mask = np.zeros((3, T), np.int32)
    for i, n in enumerate(lengths):  # left padding, as generation does
        tokens[i, T - n:] = rng.randint(2, F.TINY["vocab_size"], n)
        mask[i, T - n:] = 1
    positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None).astype(np.int32)
    ours = np.asarray(model(jnp.asarray(tokens), mask_BxT=jnp.asarray(mask),
                            positions_BxT=jnp.asarray(positions)))
    ref = F.hf_logits(hf, tokens, mask=mask, positions=positions)
    valid = mask.astype(bool)
    diff = float(np.abs(ours - ref)[valid].max())
    print(f"parity padded batch: max |dlogit| = {diff:.2e}")
    assert diff <= TOL
    for i, n in enumerate(lengths):  # padding changes nothing for the real tokens
        alone = np.asarray(model(jnp.asarray(tokens[i:i + 1, T - n:])))
        np.testing.assert_allclose(ours[i, T - n:], alone[0], atol=TOL, rtol=0)


def test_multimodal_layout_matches_transformers(tmp_path):
    hf = F.make_multimodal_checkpoint(tmp_path, [L, L, L, A], tied=True)
    model = qwen3_5.load_hf(str(tmp_path))
    tokens = np.random.RandomState(3).randint(0, F.TINY["vocab_size"], (1, 40)).astype(np.int32)
    ours = np.asarray(model(jnp.asarray(tokens)))
    ref = F.hf_logits(hf, tokens)
    assert float(np.abs(ours - ref).max()) <= TOL


def test_bf16_compute_is_close_to_fp32(hf_checkpoint):
    path = hf_checkpoint([L, L, L, A])
    tokens = jnp.asarray(np.random.RandomState(4).randint(0, F.TINY["vocab_size"], (2, 50)), jnp.int32)
    f32 = np.asarray(qwen3_5.load_hf(path)(tokens))
    bf16_model = qwen3_5.load_hf(path, dtype=jnp.float32, compute_dtype=jnp.bfloat16)
    out = bf16_model(tokens)
    assert out.dtype == jnp.float32  # logits always fp32
    assert float(np.abs(np.asarray(out) - f32).max()) < 0.1

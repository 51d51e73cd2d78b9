"""The engine's model contract (model_api.DecodeModel): the Qwen3.5 model satisfies it, and a toy model
that implements only it is driven by the Engine and the Driver (so they need nothing else)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.models import qwen3_5
from prover_jax.sampling import Driver, Engine, Request, SamplingParams
from prover_jax.sampling.model_api import MEMBERS, DecodeModel, check_model

V, D = 16, 8


class RunningSum(nnx.Module):
    """Not a transformer: the hidden state at a token is the sum of the embeddings of every token so
    far; logits = h @ out. Its cache is that running sum and the row length, nothing else."""

    def __init__(self, rngs: nnx.Rngs):
        self.vocab_size = V
        self.dtype = jnp.float32
        self.mesh = None
        self.embed = nnx.Param(jax.random.normal(rngs.params(), (V, D)))
        self.out = nnx.Param(jax.random.normal(rngs.params(), (D, V)))

    def init_cache(self, batch, max_length, dtype):
        return {"sum": jnp.zeros((batch, D), dtype), "length": jnp.zeros((batch,), jnp.int32)}

    def cache_axes(self, tensor=1):
        return {"sum": ("cache_batch", None), "length": ("cache_batch",)}

    def cache_lengths(self, cache):
        return cache["length"]

    def hidden(self, tokens_BxT, *, cache, valid_len_B):
        valid = jnp.arange(tokens_BxT.shape[1])[None, :] < valid_len_B[:, None]
        e = self.embed[...][tokens_BxT] * valid[..., None]
        h = cache["sum"][:, None] + jnp.cumsum(e, axis=1)
        return h, {"sum": cache["sum"] + e.sum(axis=1), "length": cache["length"] + valid_len_B}

    def logits(self, h_BxTxD):
        return jnp.dot(h_BxTxD, self.out[...], preferred_element_type=jnp.float32)


def greedy_reference(model, prompt, n):
    """The next n greedy tokens by the definition, on the host."""
    embed, out = np.asarray(model.embed[...]), np.asarray(model.out[...])
    total, tokens = embed[list(prompt)].sum(axis=0), []
    for _ in range(n):
        tokens.append(int(np.argmax(total @ out)))
        total = total + embed[tokens[-1]]
    return tokens


def test_qwen3_5_is_a_decode_model():
    cfg = qwen3_5.Qwen3_5Config(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=8, layer_types=(qwen3_5.LINEAR, qwen3_5.FULL))
    model = qwen3_5.Qwen3_5(cfg, rngs=nnx.Rngs(0))
    assert isinstance(model, DecodeModel)
    check_model(model)
    assert model.vocab_size == cfg.vocab_size
    cache = model.init_cache(3, 12, jnp.float32)
    assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(cache))  # row axis first, every leaf
    is_axes = lambda x: isinstance(x, tuple) and all(a is None or isinstance(a, str) for a in x)
    axes = model.cache_axes(1)
    assert jax.tree.structure(axes, is_leaf=is_axes) == jax.tree.structure(cache)
    assert all(a[0] in ("cache_batch", "cache_slots") for a in jax.tree.leaves(axes, is_leaf=is_axes))
    tokens = jnp.zeros((3, 4), jnp.int32)
    h, cache = model.hidden(tokens, cache=cache, valid_len_B=jnp.array([4, 2, 0], jnp.int32))
    assert np.asarray(model.cache_lengths(cache)).tolist() == [4, 2, 0]
    assert model.logits(h).shape == (3, 4, cfg.vocab_size) and model.logits(h).dtype == jnp.float32


class NoCacheFunctions(nnx.Module):
    """A DecodeModel's attributes and forward, but none of its cache functions."""

    def __init__(self):
        self.vocab_size, self.dtype, self.mesh = V, jnp.float32, None

    def hidden(self, tokens_BxT, *, cache, valid_len_B):
        raise NotImplementedError

    def logits(self, h_BxTxD):
        raise NotImplementedError


def test_a_model_lacking_a_member_is_refused():
    assert not isinstance(NoCacheFunctions(), DecodeModel)
    assert {"cache_axes", "cache_lengths", "init_cache"} <= set(MEMBERS)
    with pytest.raises(TypeError, match=r"lacks \['cache_axes', 'cache_lengths', 'init_cache'\]"):
        Engine(NoCacheFunctions(), max_concurrent_decodes=1, max_prefill_length=4, max_target_length=8)


def test_engine_and_driver_drive_a_toy_model():
    model = RunningSum(nnx.Rngs(0))
    assert isinstance(model, DecodeModel)
    engine = Engine(model, max_concurrent_decodes=2, max_prefill_length=8, max_target_length=12)
    params, state = engine.load_params(), engine.init_decode_state()
    prompts = [[3, 1, 4], [1, 5, 9, 2, 6]]
    want = [greedy_reference(model, p, 5) for p in prompts]
    got = [[], []]
    for slot, p in enumerate(prompts):
        padded = np.zeros(8, np.int32)
        padded[:len(p)] = p
        prefix, first = engine.prefill(params=params, padded_tokens=padded, true_length=len(p))
        state = engine.insert(prefix, state, slot)
        got[slot].append(int(first.tokens[0]))
    for _ in range(4):
        state, result = engine.generate(params, state)
        for slot in range(2):
            assert bool(result.valid[slot])
            got[slot].append(int(result.tokens[slot]))
    assert got == want
    # the driver on top: fork, and extension of a kept context (its cache is the toy's)
    driver = Driver(engine)
    [[a, b], [c]] = driver.run([Request(prompts[0], SamplingParams(), max_new_tokens=3, num_samples=2,
                                        keep_context=True),
                                Request(prompts[1], max_new_tokens=5)])
    assert a.tokens == b.tokens == want[0][:3] and c.tokens == want[1]
    [[d]] = driver.run([Request([7], context=a.context, max_new_tokens=2)])
    assert d.tokens == greedy_reference(model, prompts[0] + a.tokens + [7], 2)

"""Greedy decoding with our Engine + Driver reproduces transformers' `generate(do_sample=False)`.

Both sides read the same tiny random HF checkpoint (fp32). Prompts of ragged lengths run together in
one driver with fewer slots than prompts, so requests queue, finish at different steps and reuse
slots; one config also prefills its longer prompts in several pieces. The returned logprobs are
checked against a full forward pass of our model and against HF's raw logits.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.models import qwen3_5
from prover_jax.sampling import Driver, Engine, Request, SamplingParams

from helpers.hf import LOGPROB_TOL, MIN_GAP, TINY, hf_greedy, log_softmax_at, make_greedy_checkpoint

L, A = "linear_attention", "full_attention"
MAX_LEN = 64

# name -> (layer_types, tied, overrides, seed, slots, max_prefill_length,
#          [(prompt length, new tokens)]); the prompt lengths use two prefill buckets (compile time)
CASES = {
    # the 17 and 33 token prompts are prefilled in 2 and 3 pieces
    "LLLA_tied_chunked_prefill": ([L, L, L, A], True, {}, 3, 2, 16,
                                  [(5, 16), (17, 12), (33, 20), (9, 14)]),
    "LALA_untied_mha": ([L, A, L, A], False, dict(num_key_value_heads=4, linear_num_value_heads=2), 0,
                        3, 64, [(33, 12), (5, 20), (40, 16), (3, 13), (7, 15)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_greedy_matches_transformers_generate(name, tmp_path):
    layer_types, tied, over, seed, slots, max_prefill, shapes = CASES[name]
    hf = make_greedy_checkpoint(tmp_path, layer_types, tied, seed, **over)
    rng = np.random.RandomState(7)
    prompts = [rng.randint(0, TINY["vocab_size"], n).astype(np.int32) for n, _ in shapes]
    n_new = [k for _, k in shapes]

    model = qwen3_5.load_hf(str(tmp_path), dtype=jnp.float32)
    engine = Engine(model, max_concurrent_decodes=slots, max_prefill_length=max_prefill,
                    max_target_length=MAX_LEN)
    assert slots < len(prompts)
    driver = Driver(engine, eos_ids=())  # EOS off on both sides: every request runs its full budget
    results = driver.run([Request(p, SamplingParams(), max_new_tokens=k, seed=i)
                          for i, (p, k) in enumerate(zip(prompts, n_new))])

    graphdef, params = nnx.split(model)
    forward = jax.jit(lambda t: nnx.merge(graphdef, params)(t))
    for i, (prompt, k) in enumerate(zip(prompts, n_new)):
        assert len(results[i]) == 1
        completion = results[i][0]
        tokens, logprobs = np.asarray(completion.tokens), np.asarray(completion.logprobs)
        ref_tokens, ref_logits = hf_greedy(hf, prompt, k)
        top2 = np.sort(ref_logits, axis=-1)[:, -2:]
        assert len(ref_tokens) == k and np.min(top2[:, 1] - top2[:, 0]) > MIN_GAP, i
        np.testing.assert_array_equal(tokens, ref_tokens, err_msg=f"{name} prompt {i}")
        assert completion.finish_reason == "length" and len(logprobs) == k
        # teacher-forced full forward of our model over prompt + generated (right-padded: causal)
        seq = np.concatenate([prompt, tokens[:-1]]).astype(np.int32)
        padded = np.zeros(MAX_LEN, np.int32)
        padded[:len(seq)] = seq
        ours_full = np.asarray(forward(jnp.asarray(padded)[None])[0, len(prompt) - 1:len(seq)])
        full_lp, hf_lp = log_softmax_at(ours_full, tokens), log_softmax_at(ref_logits, tokens)
        print(f"{name} prompt {i}: max |dlogprob| vs full forward {np.abs(logprobs - full_lp).max():.1e}, "
              f"vs transformers {np.abs(logprobs - hf_lp).max():.1e}")
        np.testing.assert_allclose(logprobs, full_lp, atol=LOGPROB_TOL, rtol=0,
                                   err_msg=f"{name} prompt {i}: vs our full forward")
        np.testing.assert_allclose(logprobs, hf_lp, atol=LOGPROB_TOL, rtol=0,
                                   err_msg=f"{name} prompt {i}: vs transformers")
        assert len(set(tokens.tolist())) > 2, tokens  # a varied continuation, not one echoed token

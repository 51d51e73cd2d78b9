"""Greedy decoding with our Engine + Driver reproduces transformers' `generate(do_sample=False)`.

Both sides read the same tiny random HF checkpoint (fp32). Prompts of ragged lengths run together in
one driver with fewer slots than prompts, so requests queue, finish at different steps and reuse
slots; one config also prefills its longer prompts in several pieces. The returned logprobs are
checked against a full forward pass of our model and against HF's raw logits.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
import hf_fixtures as F  # noqa: E402
from prover_jax.models import qwen3_5  # noqa: E402
from prover_jax.sampling import Driver, Engine, Request, SamplingParams  # noqa: E402

L, A = "linear_attention", "full_attention"
MAX_LEN = 64
LOGPROB_TOL = 1e-4
MIN_GAP = 1e-3  # HF's top-2 logit gap at every greedy step: below this the argmax is not well posed

# name -> (layer_types, tied, overrides, seed, slots, max_prefill_length,
#          [(prompt length, new tokens)]); the prompt lengths use two prefill buckets (compile time)
CASES = {
    # the 17 and 33 token prompts are prefilled in 2 and 3 pieces
    "LLLA_tied_chunked_prefill": ([L, L, L, A], True, {}, 3, 2, 16,
                                  [(5, 16), (17, 12), (33, 20), (9, 14)]),
    "LALA_untied_mha": ([L, A, L, A], False, dict(num_key_value_heads=4, linear_num_value_heads=2), 0,
                        3, 64, [(33, 12), (5, 20), (40, 16), (3, 13), (7, 15)]),
}


def make_checkpoint(path, layer_types, tied, seed, **over):
    """A tiny random HF checkpoint whose greedy continuations are varied and well separated.

    Freshly initialised tiny models (tied ones especially) echo their input token forever; scaling
    the projections that write into the residual stream lets the layers, not the token embedding,
    decide the next token, and scaling the final norm spreads the logits.
    """
    model = F.make_text_checkpoint(path, layer_types, tied=tied, seed=seed, **over)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("down_proj.weight", "o_proj.weight", "out_proj.weight")):
                p.mul_(30.0)
        w = model.model.norm.weight
        w.copy_((1.0 + w) * 5.0 - 1.0)  # Qwen3.5 RMSNorm scales by (1 + w)
    model.save_pretrained(path)
    return model


def hf_greedy(model, prompt, n_new):
    """(new tokens, raw logits [n_new, V]) from HF greedy generate, batch 1, EOS disabled."""
    ids = torch.tensor(np.asarray(prompt, np.int64)[None])
    with torch.no_grad():  # explicit mask: else a prompt token equal to pad_token_id reads as padding
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=n_new, min_new_tokens=n_new, eos_token_id=None,
                             pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt):].numpy()
    return tokens, torch.cat(out.logits).float().numpy()


def log_softmax_at(logits_NxV, tokens_N):
    logp = np.asarray(jax.nn.log_softmax(jnp.asarray(logits_NxV, jnp.float32), axis=-1))
    return logp[np.arange(len(tokens_N)), tokens_N]


@pytest.mark.parametrize("name", sorted(CASES))
def test_greedy_matches_transformers_generate(name, tmp_path):
    layer_types, tied, over, seed, slots, max_prefill, shapes = CASES[name]
    hf = make_checkpoint(tmp_path, layer_types, tied, seed, **over)
    rng = np.random.RandomState(7)
    prompts = [rng.randint(0, F.TINY["vocab_size"], n).astype(np.int32) for n, _ in shapes]
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

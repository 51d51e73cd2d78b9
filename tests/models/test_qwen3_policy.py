"""Qwen3 as the trainer's policy, through code written for Qwen3.5 and left unchanged: the GRPO train step on
packed rows equals it on plain rows; LoRA adapters (qwix) go on every projection and PEFT loads the exported
adapter onto transformers' model with the same logits; a prover (orbax) checkpoint loads by its family."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.models import qwen3

from helpers import hf as F
from helpers.qwen3_hf import TINY3, make_checkpoint

CFG = qwen3.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, attention_bias=True)
LENGTHS = (5, 23, 40, 17, 9, 30)


def trajectories(seed=0):
    from prover_jax.rollout.trajectory import Trajectory

    rng = np.random.default_rng(seed)
    trajs, advs = [], []
    for i, n in enumerate(LENGTHS):
        t = Trajectory(env="x", seed=0, uid=i, task="t")
        t.tokens = rng.integers(0, CFG.vocab_size, n).tolist()
        prompt = int(rng.integers(2, 5))
        t.policy_mask = [j >= prompt for j in range(n)]
        t.logprobs = (rng.normal(-2.0, 0.5, n) * np.array(t.policy_mask)).tolist()
        trajs.append(t)
        advs.append((rng.normal(0, 1, n) * np.array(t.policy_mask)).astype(np.float32))
    return trajs, advs


def test_packed_train_step_equals_unpacked():
    from prover_jax.training.batch import pack
    from prover_jax.training.config import default_config
    from prover_jax.training.optim import make_optimizer
    from prover_jax.training.step import grpo_objective, init_train_state, make_train_step

    model = qwen3.Qwen3(CFG, rngs=nnx.Rngs(0))
    opt_cfg = default_config().optim
    opt_cfg.update(name="sgd", learning_rate=1.0, grad_clip=0.0)
    opt = make_optimizer(opt_cfg)
    init = jax.tree.map(np.asarray, init_train_state(model, opt))
    loss_cfg = default_config().loss
    loss_cfg.update(horizon=64)
    step = make_train_step(nnx.graphdef(model), grpo_objective(loss_cfg), opt)
    trajs, advs = trajectories()
    plain = pack(trajs, advs, micro_batch_size=3, length=64)
    packed = pack(trajs, advs, micro_batch_size=1, max_tokens_per_row=64)
    (s1, m1), (s2, m2) = (step(jax.tree.map(jnp.asarray, init), b) for b in (plain, packed))
    assert int(m1["num_seqs"]) == int(m2["num_seqs"]) == len(LENGTHS) and np.isfinite(float(m1["loss"]))
    for k in ("loss", "pg_loss", "entropy", "num_tokens"):
        np.testing.assert_allclose(m2[k], m1[k], rtol=1e-5, atol=1e-7, err_msg=k)
    moved = False
    for a, b, p0 in zip(jax.tree.leaves(s1.params), jax.tree.leaves(s2.params), jax.tree.leaves(init.params)):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5)
        moved |= not np.array_equal(np.asarray(a), p0)
    assert moved


def test_lora_adapters_and_peft_export(tmp_path):
    pytest.importorskip("peft")
    from peft import PeftModel

    from prover_jax.models.lora import LoraSpec, adapter_count, apply_lora, split_lora, write_peft

    spec = LoraSpec(rank=4, alpha=8.0)
    hf = make_checkpoint(str(tmp_path / "base"), tied=True, attention_bias=True)
    ours = qwen3.load_hf(str(tmp_path / "base"))
    tok = np.random.RandomState(1).randint(0, TINY3["vocab_size"], (2, 11)).astype(np.int32)
    base = np.asarray(ours(jnp.asarray(tok)))
    graphdef, adapters, frozen = split_lora(apply_lora(ours, spec))
    assert adapter_count(adapters) == 7 * TINY3["num_hidden_layers"]  # q/k/v/o + gate/up/down per layer
    np.testing.assert_array_equal(np.asarray(nnx.merge(graphdef, adapters, frozen)(jnp.asarray(tok))), base)
    key, flat = jax.random.PRNGKey(1), []
    for path, v in nnx.to_flat_state(adapters):  # B = 0 makes an adapter a no-op: move every B
        if str(path[-1]).endswith("_lora_b"):
            key, k = jax.random.split(key)
            v = v.replace(0.2 * jax.random.normal(k, v.shape, v[...].dtype))
        flat.append((path, v))
    adapters = nnx.from_flat_state(flat)
    got = np.asarray(nnx.merge(graphdef, adapters, frozen)(jnp.asarray(tok)))
    assert np.abs(got - base).max() > 0.1
    write_peft(str(tmp_path / "adapter"), adapters, spec, base_model=str(tmp_path / "base"),
               path_to_hf=qwen3.path_to_hf)
    peft_model = PeftModel.from_pretrained(hf, str(tmp_path / "adapter")).eval()
    np.testing.assert_allclose(got, F.hf_logits(peft_model, tok), atol=2e-5)


def test_prover_checkpoint_loads_by_its_family(tmp_path):
    from prover_jax.convert import save_checkpoint
    from prover_jax.sampling.loader import load_policy

    make_checkpoint(str(tmp_path / "hf"), tied=False)
    F.word_tokenizer(str(tmp_path / "hf"))
    net = qwen3.load_hf(str(tmp_path / "hf"))
    save_checkpoint(net, str(tmp_path / "ckpt"))
    for path in ("hf", "ckpt"):
        model, tok, eos = load_policy(str(tmp_path / path), jnp.float32)
        assert type(model) is qwen3.Qwen3 and model.config == net.config and tok is not None and eos == (1,)
        for (_, x), (_, y) in zip(nnx.to_flat_state(nnx.state(net, nnx.Param)),
                                  nnx.to_flat_state(nnx.state(model, nnx.Param))):
            np.testing.assert_array_equal(np.asarray(x.get_value()), np.asarray(y.get_value()))


@pytest.mark.parametrize("max_tokens_per_row", [0, 1024], ids=["rows", "packed"])
def test_trainer_of_a_qwen3_folder_takes_an_rl_step(tmp_path, household_tokenizer, max_tokens_per_row):
    """The trainer (init hf) of a Qwen3 folder plays episodes with the engine and takes one RL step: its
    log-probs of the sampled ids are the sampler's (ratio 1), and the weights move."""
    from prover_jax.training.trainer import Trainer

    from helpers.demo_config import trainer_config

    folder = str(tmp_path / "policy")
    cfg = qwen3.CONFIGS["demo"].replace(eos_token_id=household_tokenizer.convert_tokens_to_ids("<|im_end|>"))
    qwen3.save_hf(qwen3.Qwen3(cfg, rngs=nnx.Rngs(0)), folder)
    household_tokenizer.save_pretrained(folder)
    c = trainer_config()
    c.model.init, c.model.path = "hf", folder
    c.sft.steps, c.credit.method, c.train.max_tokens_per_row = 0, "grpo", max_tokens_per_row
    t = Trainer(c, str(tmp_path / "run"))
    try:
        assert type(nnx.merge(t.run.policy.plain, t.state.params)) is qwen3.Qwen3
        assign = t.run.credit.assign

        def every_token_plus_one(groups):  # a non-zero gradient though a random policy fails every task
            out = assign(groups)
            out.advantages = [[np.where(np.asarray(a) != 0, a, 1.0).astype(np.float32)
                               * np.asarray(traj.policy_mask, np.float32) for a, traj in zip(g, group)]
                              for g, group in zip(out.advantages, groups)]
            return out

        before = jax.tree.map(np.asarray, t.state.params)
        t.run.credit.assign = every_token_plus_one
        m = t.rl_step()
        assert m["policy_tokens"] > 0 and abs(m["ratio_mean"] - 1.0) < 1e-3 and m["approx_kl"] < 1e-6, m
        moved = jax.tree.map(lambda a, b: bool(np.any(a != np.asarray(b))), before, t.state.params)
        assert any(jax.tree.leaves(moved))
    finally:
        t.close()

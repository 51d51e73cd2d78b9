"""Packed rows and policy-token logits in training: first-fit placement, and the train step, the
reference log-prob pass and a trainer's RL step on packed rows, or projecting onto the vocabulary at
the policy tokens only (train.logits = "policy"), equal the plain ones (fp32), for every aggregation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from prover_jax.rollout.trajectory import Trajectory
from prover_jax.training import trainer as trainer_lib
from prover_jax.training.batch import first_fit, pack, policy_positions
from prover_jax.training.config import default_config
from prover_jax.training.loss import AGGREGATIONS, token_logprobs
from prover_jax.training.optim import make_optimizer
from prover_jax.training.logprobs import make_logprob_fn
from prover_jax.training.step import grpo_objective, init_train_state, make_train_step

from helpers.demo_config import trainer_config
from helpers.tiny import tiny_config, tiny_model

CFG = tiny_config()
LENGTHS = (5, 23, 40, 17, 9, 30)  # split the delta rule's 16-token chunks; pack into 64-token rows


def trajectories(seed=0):
    rng = np.random.default_rng(seed)
    trajs, advs = [], []
    for i, n in enumerate(LENGTHS):
        t = Trajectory(env="x", seed=0, uid=i, task="t")
        t.tokens = rng.integers(0, CFG.vocab_size, n).tolist()
        prompt = int(rng.integers(2, 5))
        t.policy_mask = [j >= prompt for j in range(n)]
        t.logprobs = (rng.normal(-2.0, 0.5, n) * np.array(t.policy_mask)).tolist()  # off the policy: clips act
        trajs.append(t)
        advs.append((rng.normal(0, 1, n) * np.array(t.policy_mask)).astype(np.float32))
    return trajs, advs


def test_first_fit_places_every_trajectory_once_within_the_row():
    rows = first_fit(LENGTHS, 64)
    assert sorted(i for r in rows for i in r) == list(range(len(LENGTHS)))
    assert all(sum(LENGTHS[i] for i in r) <= 64 for r in rows) and len(rows) == 2  # 124 tokens in 2 rows
    with pytest.raises(ValueError, match="train.max_tokens_per_row = 32"):
        first_fit(LENGTHS, 32)


def test_packed_batch_layout():
    trajs, advs = trajectories()
    b = pack(trajs, advs, micro_batch_size=2, max_tokens_per_row=64)
    seg, valid, mask = (b[k].reshape(-1, 64) for k in ("segment_ids", "valid", "loss_mask"))
    assert seg.shape[0] == 2 and valid.sum() == sum(LENGTHS) and ((seg > 0) == valid).all()
    starts = valid & np.pad(seg[:, 1:] != seg[:, :-1], ((0, 0), (1, 0)), constant_values=True)
    assert starts.sum() == len(LENGTHS) and not (mask & starts).any()  # no trajectory's first token is trained


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
@pytest.mark.parametrize("at_policy", [False, True], ids=["logits_all", "logits_policy"])
def test_packed_train_step_equals_unpacked(aggregation, at_policy):
    model = tiny_model(CFG)
    graphdef = nnx.graphdef(model)
    opt_cfg = default_config().optim
    opt_cfg.update(name="sgd", learning_rate=1.0, grad_clip=0.0)
    opt = make_optimizer(opt_cfg)
    init = jax.tree.map(np.asarray, init_train_state(model, opt))
    loss_cfg = default_config().loss
    loss_cfg.update(aggregation=aggregation, horizon=64)
    step = make_train_step(graphdef, grpo_objective(loss_cfg), opt)
    trajs, advs = trajectories()
    plain = pack(trajs, advs, micro_batch_size=3, length=64)  # [2, 3, 64]
    packed = pack(trajs, advs, micro_batch_size=1, max_tokens_per_row=64)  # [2, 1, 64]
    if at_policy:  # the packed run also projects at its policy tokens only
        packed["policy_at"] = policy_positions(packed["loss_mask"], 128)
    (s1, m1), (s2, m2) = (step(jax.tree.map(jnp.asarray, init), b) for b in (plain, packed))
    assert int(m1["num_seqs"]) == int(m2["num_seqs"]) == len(LENGTHS)
    for k in ("loss", "pg_loss", "clip_frac", "ratio_mean", "entropy", "num_tokens"):
        np.testing.assert_allclose(m2[k], m1[k], rtol=1e-5, atol=1e-7, err_msg=k)
    assert float(m1["clip_frac"]) > 0
    for a, b in zip(jax.tree.leaves(s1.params), jax.tree.leaves(s2.params)):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5)


def test_sum_norm_horizon_is_a_constant_not_the_row_length():
    """seq-mean-token-sum-norm divides by S T with T = the objective's horizon (the trainer's
    rollout.max_target_length) unless loss.horizon is set: rows of 64 and packed rows of 128 give one loss."""
    model = tiny_model(CFG)
    opt = make_optimizer(default_config().optim)
    init = jax.tree.map(np.asarray, init_train_state(model, opt))
    fresh = lambda: jax.tree.map(jnp.asarray, init)  # noqa: E731 (the step donates its state)
    loss_cfg = default_config().loss
    loss_cfg.aggregation = "seq-mean-token-sum-norm"
    trajs, advs = trajectories()
    plain = pack(trajs, advs, micro_batch_size=3, length=64)
    packed = pack(trajs, advs, micro_batch_size=1, max_tokens_per_row=128)
    step = make_train_step(nnx.graphdef(model), grpo_objective(loss_cfg, horizon=96), opt)
    (_, m1), (_, m2) = (step(fresh(), b) for b in (plain, packed))
    np.testing.assert_allclose(m2["loss"], m1["loss"], rtol=1e-5)
    loss_cfg.horizon = 48  # loss.horizon wins: the loss scales by 96 / 48
    _, m3 = make_train_step(nnx.graphdef(model), grpo_objective(loss_cfg, horizon=96), opt)(fresh(), plain)
    np.testing.assert_allclose(m3["loss"], 2 * m1["loss"], rtol=1e-5)


def test_reference_logprobs_of_packed_rows_equal_unpacked():
    model = tiny_model(CFG)
    _, params = nnx.split(model, nnx.Param)
    fn = make_logprob_fn(nnx.graphdef(model), logprob_chunk=16)
    trajs, advs = trajectories(1)
    plain = {k: v.reshape(-1, 64) for k, v in pack(trajs, advs, 1, length=64).items()}
    packed = {k: v.reshape(-1, 64) for k, v in pack(trajs, advs, 1, max_tokens_per_row=64).items()}
    lp_plain = np.asarray(fn(params, plain["tokens"], plain["valid"]))
    lp_packed = np.asarray(fn(params, packed["tokens"], packed["valid"], packed["segment_ids"]))
    got = lp_packed[packed["loss_mask"]]
    order = [i for r in first_fit(LENGTHS, 64) for i in r]
    want = np.concatenate([lp_plain[i][plain["loss_mask"][i]] for i in order])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_token_logprobs_at_policy_positions_equal_the_full_projection():
    model = tiny_model(CFG)
    trajs, advs = trajectories(2)
    b = {k: v.reshape(-1, 64) for k, v in pack(trajs, advs, 1, length=64).items()}
    at = policy_positions(b["loss_mask"], 64)
    for chunk in (None, 16):
        full_lp, full_ent = token_logprobs(model, b["tokens"], b["valid"], chunk=chunk)
        lp, ent = token_logprobs(model, b["tokens"], b["valid"], chunk=chunk, at_BxP=at)
        m = b["loss_mask"]
        np.testing.assert_allclose(np.asarray(lp)[m], np.asarray(full_lp)[m], atol=1e-6, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(ent)[m], np.asarray(full_ent)[m], atol=1e-6, rtol=1e-6)
        assert not np.asarray(lp)[~m].any() and not np.asarray(ent)[~m].any()
    with pytest.raises(ValueError, match="more than P = 4"):
        policy_positions(b["loss_mask"], 4)


def test_trainer_rl_step_packed_equals_unpacked(tmp_path):
    rows = {}
    for cap, logits in ((0, "all"), (1024, "policy")):
        c = trainer_config()
        c.sft.steps = 0
        c.credit.method = "grpo"
        c.loss.kl_coef = 0.1  # the reference pass too (its first step: the reference is the policy)
        c.train.max_tokens_per_row = cap
        c.train.logits = logits
        c.optim.name = "sgd"  # Adam would turn the 1e-9 noise of near-zero gradients into lr-sized steps
        t = trainer_lib.Trainer(c, str(tmp_path / f"cap{cap}"))
        try:
            rows[cap] = t.rl_step()
            rows[cap]["params"] = jax.tree.map(np.asarray, t.state.params)
        finally:
            t.close()
    a, b = rows[0], rows[1024]
    assert a["applied"] and b["applied"] and a["success_rate"] == b["success_rate"]
    for k in ("loss", "num_seqs", "num_tokens", "ratio_mean", "kl", "grad_norm"):
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-7, err_msg=k)
    for x, y in zip(jax.tree.leaves(a["params"]), jax.tree.leaves(b["params"])):
        np.testing.assert_allclose(y, x, atol=1e-5, rtol=1e-4)


def test_rows_shorter_than_an_episode_are_refused(tmp_path):
    c = trainer_config()
    c.train.max_tokens_per_row = 512
    with pytest.raises(ValueError, match="train.max_tokens_per_row = 512 is below rollout.max_target_length = 1024"):
        trainer_lib.Trainer(c, str(tmp_path / "w"))


def test_micro_batch_buckets_and_the_bucket_of_a_count():
    from prover_jax.training.batch import bucket, micro_batch_buckets

    assert micro_batch_buckets(6) == [1, 2, 4, 6] and micro_batch_buckets(8) == [1, 2, 4, 8]
    assert micro_batch_buckets(1) == [1] and micro_batch_buckets(16, (3, 12, 40)) == [3, 12, 16]
    assert [bucket(n, [1, 2, 4, 6]) for n in (1, 2, 3, 4, 5, 6)] == [1, 2, 4, 4, 6, 6]
    with pytest.raises(ValueError, match="past the largest bucket 6"):
        bucket(7, [1, 2, 4, 6])
    with pytest.raises(ValueError, match="train.packed_buckets must hold micro-batch counts >= 1"):
        micro_batch_buckets(4, (0, 2))


def test_precompile_covers_every_packed_bucket(tmp_path):
    """Packed rows with train.precompile: the update is compiled for each micro-batch bucket before the first
    step, and the steps then compile no update (a miss would call `jitted`)."""
    from prover_jax.training.assemble import packed_micro_batches

    c = trainer_config()
    c.sft.steps, c.credit.method = 0, "grpo"
    c.train.max_tokens_per_row, c.train.micro_batch_size, c.train.precompile = 1024, 1, True
    c.train.logits = "all"  # one program per bucket (policy logits: one per bucket and policy width)
    assert packed_micro_batches(c) == [1, 2, 4]  # 2 tasks x 2 episodes, one per row: 4 micro-batches
    t = trainer_lib.Trainer(c, str(tmp_path / "packed"))
    try:
        step = t.run.train_step
        assert len(step._compiled) == 3
        step.jitted = lambda *a, **k: (_ for _ in ()).throw(AssertionError("an update compiled in a step"))
        for _ in range(2):
            assert t.rl_step()["applied"]
    finally:
        t.close()

"""The trainer end to end on a tiny demo config: SFT + 2 RL steps; a run killed in a step and started
again writes the rows of a run never stopped, to the digit; a non-finite loss skips the update and is
logged; HF export."""

import json
import os

import grain
import numpy as np
import pytest

from prover_jax.models import qwen3_5
from prover_jax.training import trainer as trainer_lib
from prover_jax.training.loss import check_sampling
from prover_jax.training.run import train

from helpers.credit import nan_advantages, signed_advantages
from helpers.demo_config import trainer_config as tiny_config


def rows(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_step_row(r, c):
    """A training row's figures agree with each other and with the config (what the trainer zero-fills
    must still add up): episode counts, turns and tokens, ProVer's funnel, a random judge's cost, times."""
    G, N, R = c.rollout.groups_per_step, c.rollout.group_size, c.rollout.max_action_tokens
    assert r["episodes"] == r["trained_episodes"] == G * N and len(r["tasks"]) == G  # ProVer adds no episodes
    wins = r["success_rate"] * G * N
    assert wins == round(wins), r["success_rate"]  # a whole number of successful episodes
    assert r["turns"] == pytest.approx(r["turns_total"] / (G * N)) and 1 <= r["turns"] <= c.env.kwargs.max_turns
    assert r["turns_total"] <= r["policy_tokens"] <= R * r["turns_total"]  # 1 .. R tokens per response
    assert np.isfinite(r["loss"]) and np.isfinite(r["kl"]) and r["applied"] is True
    # eligible groups are mixed ones: at most one per success and per failure
    assert r["prover/proposals"] == r["prover/eligible_groups"] <= min(G, wins, G * N - wins)
    assert r["prover/accepted"] <= r["prover/valid_proposals"] <= r["prover/proposals"]
    n_valid = r["prover/valid_proposals"]
    assert r["prover/acceptance_rate"] == (r["prover/accepted"] / n_valid if n_valid else 0.0)
    extra = r["prover/verify_policy_tokens"]
    assert r["credit/extra_policy_tokens"] == extra and (extra > 0) == (n_valid > 0)  # 2 x k continuations each
    assert r["prover/extra_token_frac"] == pytest.approx(extra / r["policy_tokens"])
    assert r["judge/calls"] == r["judge/cost_usd"] == 0  # the random judge calls no model
    assert r["time/step_s"] >= r["time/update_s"] > 0 and r["time/rollout_s"] > 0


def expected_tasks(c, step):
    ds = grain.MapDataset.range(c.env.train_seed_start, c.env.train_seed_start + 1_000_000)
    return [int(x) for x in ds.shuffle(seed=c.seed).batch(c.rollout.groups_per_step)[step]]


def steady(rows_):
    """Rows without wall times and compile counts: what must repeat to the digit."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "total/time")) and k != "compiles"}
            for r in rows_]


def test_a_crashed_run_resumes_to_the_digit(tmp_path, monkeypatch):
    """A run killed in its second RL step and started again writes the same rows as the same config
    run without a stop (SFT, ProVer steps with verification, evaluations): every metric but wall times
    and compile counts, to the digit, so a figure of the demo is a figure of its build however often it
    was interrupted. The step count continues, spending totals count each step once, the HF export loads."""
    c = tiny_config()
    c.credit.band_high = 1.0  # a mixed group (1 of 2) is eligible, so ProVer's figures can move
    train(c, str(tmp_path / "straight"), progress=False)

    workdir = str(tmp_path / "run")
    real_step = trainer_lib.Trainer.rl_step
    calls = {"n": 0}

    def crashing_step(self):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed")
        return real_step(self)

    monkeypatch.setattr(trainer_lib.Trainer, "rl_step", crashing_step)
    with pytest.raises(KeyboardInterrupt):
        train(c, workdir, progress=False)
    first = [r for r in rows(workdir) if "success_rate" in r]  # training rows (eval rows have eval/...)
    assert [r["step"] for r in first] == [1] and first[0]["tasks"] == expected_tasks(c, 0)
    assert [r["step"] for r in rows(workdir) if "eval/success" in r] == [0]  # before RL
    assert os.path.exists(os.path.join(workdir, "checkpoints", "1"))
    monkeypatch.setattr(trainer_lib.Trainer, "rl_step", real_step)
    summary = train(c, workdir, export_hf=str(tmp_path / "hf"), progress=False)
    got = [r for r in rows(workdir) if "success_rate" in r]
    assert [r["step"] for r in got] == [1, 2] and got[1]["tasks"] == expected_tasks(c, 1)
    evals = [r for r in rows(workdir) if "eval/success" in r]
    assert [r["step"] for r in evals] == [0, 2] and all(r["eval/episodes"] == 2 for r in evals)
    assert steady(rows(workdir)) == steady(rows(str(tmp_path / "straight")))
    assert summary["eval_after_rl"] == {k: v for k, v in evals[-1].items() if k != "step"}
    assert summary["success_before_rl"] == summary["eval_before_rl"]["eval/success"] == evals[0]["eval/success"]
    for r in got:
        check_step_row(r, c)
    # spending totals run on across the crash: each step counted once
    for key in ("policy_tokens", "credit/extra_policy_tokens", "judge/calls"):
        assert [r[f"total/{key}"] for r in got] == [got[0][key], got[0][key] + got[1][key]], key
    assert "sft" not in summary or summary["sft"]["demos"] > 0
    assert 0.0 <= summary["success_after_rl"] <= 1.0 and os.path.exists(summary["plot"])
    assert qwen3_5.Qwen3_5Config.from_pretrained(str(tmp_path / "hf")).vocab_size == 1024
    assert os.path.exists(str(tmp_path / "hf" / "tokenizer.json"))


def test_build_wires_one_frozen_run(tmp_path):
    """wiring.build: one frozen record whose pieces are wired to each other (the rollouts decode on the
    run's driver, the pipeline credits with the run's method over its pools, verification has its own
    pool); the Trainer keeps only the loop's state beside it and builds nothing itself."""
    import dataclasses

    from prover_jax.training.wiring import Run

    c = tiny_config()
    c.sft.steps = 0
    t = trainer_lib.Trainer(c, str(tmp_path / "wired"))
    try:
        run = t.run
        assert isinstance(run, Run) and t.state is run.initial_state and not t.restored
        with pytest.raises(dataclasses.FrozenInstanceError):
            run.credit = None
        assert run.rollout.driver is run.driver is run.greedy.driver
        assert run.pipeline.credit is run.credit and run.pipeline.pool is run.pool
        assert run.needs.verifier and run.verify_pool is not None and run.verify_pool is not run.pool
        assert run.pool.num_envs == c.rollout.groups_per_step * c.rollout.group_size
        assert run.graphdef is run.policy.graphdef and run.metrics_path == run.root / "metrics.jsonl"
        assert set(vars(t)) <= {"config", "run", "state", "ref_params", "batches_drawn", "off_policy", "_prefetched",
                                "_tasks_before", "_logprob_fn", "sft_done", "skipped_in_a_row", "totals", "restored",
                                "compiles"}
    finally:
        t.close()


def test_nan_loss_skips_update(tmp_path, monkeypatch):
    c = tiny_config()
    c.sft.steps = 0
    c.credit.method = "grpo"
    t = trainer_lib.Trainer(c, str(tmp_path / "nan"))
    try:
        t.run.credit.assign = nan_advantages(t.run.credit.assign)
        before = [np.asarray(x).copy() for x in __import__("jax").tree.leaves(t.state.params)]
        row = t.rl_step()
        assert row["applied"] is False and row["skipped"] == 1.0 and t.step == 0
        after = __import__("jax").tree.leaves(t.state.params)
        assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(before, after))
    finally:
        t.close()


def test_bf16_rollouts_of_an_fp32_policy(tmp_path):
    """rollout.dtype=bfloat16: the sampler decodes from bf16 copies of the fp32 weights; the log-probs
    it records are the behaviour policy's, within bf16 rounding of the fp32 policy's, and the loss's
    ratio is taken against them."""
    import jax
    import jax.numpy as jnp

    c = tiny_config()
    c.sft.steps = 0
    c.credit.method = "grpo"
    c.rollout.dtype = "bfloat16"
    t = trainer_lib.Trainer(c, str(tmp_path / "bf16"))
    try:
        assert {x.dtype for x in jax.tree.leaves(t.run.driver.params)} == {jnp.dtype(jnp.bfloat16)}
        assert {x.dtype for x in jax.tree.leaves(t.state.params)} == {jnp.dtype(jnp.float32)}
        row = t.rl_step()
        assert row["applied"] is True and np.isfinite(row["loss"])
        assert 0 < abs(row["ratio_mean"] - 1.0) < 0.05 and row["approx_kl"] < 1e-2
    finally:
        t.close()
    c.rollout.dtype = "float16"
    with pytest.raises(ValueError, match="rollout.dtype"):
        trainer_lib.Trainer(c, str(tmp_path / "f16"))


@pytest.mark.parametrize("off_policy", [0, 1])
def test_off_policy_steps(tmp_path, off_policy):
    """off_policy_steps=1: step n+1's batch is played during update n with the weights before it
    (the last step plays none), and the loss's ratio is against those behaviour log-probs; with 0,
    every batch is on-policy."""
    import jax
    import jax.numpy as jnp

    from prover_jax.training.batch import pack
    from prover_jax.training.logprobs import make_logprob_fn

    c = tiny_config()
    c.sft.steps = 0
    c.credit.method = "grpo"
    c.optim.learning_rate = 3e-2
    c.rollout.off_policy_steps = off_policy
    t = trainer_lib.Trainer(c, str(tmp_path / f"off{off_policy}"))
    logp = make_logprob_fn(t.run.graphdef)

    def sampled_under(trajs, params):
        rows = pack(trajs, [np.zeros(len(x.tokens), np.float32) for x in trajs], len(trajs))
        got = np.asarray(logp(params, rows["tokens"][0], rows["valid"][0]))
        m = rows["loss_mask"][0]
        return np.abs(got[m] - rows["old_logprobs"][0][m]).max()

    t.run.credit.assign = signed_advantages(t.run.credit.assign)
    try:
        theta0 = jax.tree.map(jnp.copy, t.state.params)
        first = t.rl_step()
        assert abs(first["ratio_mean"] - 1.0) < 1e-4
        if off_policy:
            trajs = t._prefetched[0].played  # the next batch, played during the first update
            assert sampled_under(trajs, theta0) < 1e-4 and sampled_under(trajs, t.state.params) > 1e-3
            assert t._meta()["batches_drawn"] == 1  # a checkpoint now replays the prefetched batch
        second = t.rl_step()
        if off_policy:
            assert abs(second["ratio_mean"] - 1.0) > 1e-3 and second["approx_kl"] > 1e-7
        else:
            assert abs(second["ratio_mean"] - 1.0) < 1e-4
        # step train.steps (the last) plays no batch for a step that will not come
        assert c.train.steps == 2 and t._prefetched is None and t.batches_drawn == 2
        assert second["tis_weight_mean"] == 1.0
    finally:
        t.close()


def test_extra_episodes_trained_and_kl_reference_is_the_policy_rl_starts_from(tmp_path):
    """A credit method's extra episodes (CreditOutput.groups) enter the batch; the KL reference is the
    policy after SFT, kept across a restart; spending totals survive the restart too."""
    import copy

    import jax

    c = tiny_config()
    c.credit.method = "grpo"
    c.loss.kl_coef = 0.1
    c.optim.learning_rate = 3e-2
    workdir = str(tmp_path / "kl")
    t = trainer_lib.Trainer(c, workdir)
    try:
        before_sft = [np.asarray(x).copy() for x in jax.tree.leaves(t.state.params)]
        t.run_sft()
        after_sft = [np.asarray(x).copy() for x in jax.tree.leaves(t.state.params)]
        assert any(not np.array_equal(a, b) for a, b in zip(before_sft, after_sft))
        real_assign = t.run.credit.assign

        def doubled(groups):  # every episode twice (a copy under a new uid), advantages +-1
            out = real_assign(groups)
            out.groups = [list(g) + [copy.deepcopy(x) for x in g] for g in groups]
            for g in out.groups:
                for n, x in enumerate(g[len(g) // 2:]):
                    x.uid = 10_000 + n
            out.advantages = [[np.where(np.asarray(x.policy_mask), np.float32(1 - 2 * (n % 2)), 0)
                               for n, x in enumerate(g)] for g in out.groups]
            return out

        t.run.credit.assign = doubled
        row = t.rl_step()
        assert row["trained_episodes"] == 2 * row["episodes"] == 8 and row["applied"]
        assert row["total/policy_tokens"] == row["policy_tokens"] > 0
        ref = [np.asarray(x) for x in jax.tree.leaves(t.ref_params)]
        assert all(np.array_equal(a, b) for a, b in zip(ref, after_sft))
        assert any(not np.array_equal(np.asarray(a), b) for a, b in zip(jax.tree.leaves(t.state.params), after_sft))
        t.save()
    finally:
        t.close()
    t = trainer_lib.Trainer(c, workdir)
    try:
        assert t.restored and t.step == 1 and t.totals["policy_tokens"] == row["total/policy_tokens"]
        ref = [np.asarray(x) for x in jax.tree.leaves(t.ref_params)]
        assert all(np.array_equal(a, b) for a, b in zip(ref, after_sft))
    finally:
        t.close()


def test_resume_trains_at_the_configured_learning_rate(tmp_path, caplog):
    """A checkpoint written at lr 2e-4 and resumed with 1e-5 configured trains at 1e-5 (optax keeps a
    constant rate in the optimizer state, which the restore would otherwise bring back), and one warning
    names both rates; resumed with the checkpoint's own rate, it warns of nothing."""
    import logging

    c = tiny_config()
    c.sft.steps = 0
    c.credit.method = "grpo"
    c.optim.learning_rate = 2e-4
    workdir = str(tmp_path / "lr")
    t = trainer_lib.Trainer(c, workdir)
    try:
        assert t.rl_step()["learning_rate"] == pytest.approx(2e-4)
        t.save()
    finally:
        t.close()
    for configured, warned in ((1e-5, True), (2e-4, False)):
        c.optim.learning_rate = configured
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            t = trainer_lib.Trainer(c, workdir)
        try:
            assert t.restored and t.step == 1
            assert float(t.state.opt_state.hyperparams["learning_rate"]) == pytest.approx(configured)
            msgs = [r.getMessage() for r in caplog.records if "optim.learning_rate" in r.getMessage()]
            assert len(msgs) == warned, msgs
            if warned:
                assert "0.0002" in msgs[0] and "1e-05" in msgs[0]
            assert t.rl_step()["learning_rate"] == pytest.approx(configured)  # the rate the update applied
        finally:
            t.close()


def test_configured_learning_rate_follows_the_warmup_and_the_decay():
    from prover_jax.training.config import default_config
    from prover_jax.training.optim import configured_learning_rate
    cfg = default_config().optim
    cfg.update(learning_rate=0.1, warmup_steps=4)
    assert [configured_learning_rate(cfg, n) for n in (0, 1, 2, 4, 9)] == pytest.approx([0.025, 0.025, 0.05, 0.1, 0.1])
    # cosine over 10 updates after the warmup, to 0.2 lr: update t applies 0.1 (.2 + .8 (1 + cos(pi (t - 4) / 10)) / 2)
    cfg.update(decay_steps=10, decay="cosine", end_lr_frac=0.2)
    want = [0.1 * (0.2 + 0.8 * (1 + np.cos(np.pi * min(max(t - 4, 0), 10) / 10)) / 2) * min(1, (t + 1) / 4)
            for t in (0, 3, 4, 9, 14, 30)]
    assert [configured_learning_rate(cfg, n + 1) for n in (0, 3, 4, 9, 14, 30)] == pytest.approx(want, rel=1e-6)
    cfg.update(warmup_steps=0, decay="linear", end_lr_frac=0.0)
    assert [configured_learning_rate(cfg, n + 1) for n in (0, 5, 10, 12)] == pytest.approx([0.1, 0.05, 0.0, 0.0])
    cfg.update(decay="step")
    with pytest.raises(ValueError, match="optim.decay"):
        configured_learning_rate(cfg, 1)


@pytest.mark.parametrize("field,value", [("temperature", 0.7), ("top_p", 0.9), ("top_k", 20)])
def test_truncated_or_tempered_sampling_is_refused(field, value):
    r = tiny_config().rollout
    check_sampling(r)
    r[field] = value
    with pytest.raises(ValueError, match=f"rollout.{field}={value}"):
        check_sampling(r)

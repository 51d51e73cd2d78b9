"""RL on Qwen3.5's real vocabulary (tests/helpers/qwen_vocab.py): a tiny random Qwen3.5 with the
248,320-row embedding plays household episodes in its checkpoint's chat layout (the template's generation
prompt, thinking off), each turn a sampled reply that stops at `<|im_end|>` (or the action budget), and one RL step with `train.logprob_chunk` computes the same
log-probs as the sampler recorded, on the very ids it sampled (token in, token out), and moves the
weights."""

import json
import os

import jax
import numpy as np
import pytest

from prover_jax.training.trainer import Trainer

from helpers.demo_config import trainer_config
from helpers.hf import make_greedy_checkpoint
from helpers.qwen_vocab import qwen3_5_tokenizer

IM_START, IM_END = 248045, 248046


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("qwen3_5_real"))
    make_greedy_checkpoint(path, ["linear_attention", "full_attention"], True, 3, vocab_size=248320,
                           eos_token_id=IM_END, max_position_embeddings=8192)
    qwen3_5_tokenizer(path)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [IM_END]}, f)
    c = trainer_config()
    c.model.init, c.model.path = "hf", path
    c.sft.steps, c.train.logprob_chunk, c.credit.method = 0, 64, "grpo"
    c.rollout.max_action_tokens = 16
    t = Trainer(c, str(tmp_path_factory.mktemp("run")))
    yield t
    t.close()


def test_episodes_in_the_chat_layout_stop_at_im_end(trainer):
    t = trainer
    assert len(t.run.tokenizer) == 248077 and t.run.tokenizer.convert_tokens_to_ids("<|im_end|>") == IM_END
    trajs = t.run.rollout.run(t.run.pool, [1000, 1001])
    for traj in trajs:
        assert traj.turns and traj.tokens[0] == IM_START
        for turn in traj.turns:
            reply = traj.tokens[turn.start:turn.end]
            assert all(traj.policy_mask[turn.start:turn.end]) and reply
            opening = t.run.tokenizer.decode(traj.tokens[:turn.start])
            # rollout.chat_template=auto: the checkpoint's generation prompt, thinking off (an empty think block)
            assert opening.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), opening[-80:]
            assert IM_END not in reply[:-1]
            assert reply[-1] == IM_END or len(reply) == t.config.rollout.max_action_tokens, turn


def test_one_rl_step_with_chunked_logprobs_on_the_sampled_ids(trainer):
    t = trainer
    assign = t.run.credit.assign

    def every_token_plus_one(groups):  # a non-zero gradient though a random policy fails every task
        out = assign(groups)
        out.advantages = [[np.where(np.asarray(a) != 0, a, 1.0).astype(np.float32) * np.asarray(
            traj.policy_mask, np.float32) for a, traj in zip(g, group)] for g, group in zip(out.advantages, groups)]
        return out

    before = jax.tree.map(np.asarray, t.state.params)
    t.run.credit.assign = every_token_plus_one
    try:
        m = t.rl_step()
    finally:
        t.run.credit.assign = assign
    # the trainer's chunked log-probs of the trajectory ids equal the sampler's for the same ids
    assert m["policy_tokens"] > 0 and abs(m["ratio_mean"] - 1.0) < 1e-3 and m["approx_kl"] < 1e-6, m
    moved = jax.tree.map(lambda a, b: bool(np.any(a != np.asarray(b))), before, t.state.params)
    assert any(jax.tree.leaves(moved))

"""Tokenizers: the checkpoint's own (real runs) or a small byte-level BPE trained on environment text.

    tok = load_tokenizer(checkpoint_dir)                       # tokenizer.json etc. of an HF folder
    tok = train_tokenizer(env_corpus("household", range(200)), vocab_size=2048)   # built-in policies
    tok.save_pretrained(out_dir)                               # saved next to the weights

A built-in policy cannot download a hub tokenizer, so it gets one trained on what its environment
prints (system prompt, observations, expert actions) with the ChatML special tokens. Byte-level BPE
encodes ANY text, non-ASCII included, so a malformed model response always round-trips.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from transformers import PreTrainedTokenizerFast

from prover_jax.models import hf_folder
from prover_jax.rollout.chat import ChatTemplate, observation_text

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


# `phrases`: pieces end after punctuation (and the spaces that follow it), never at a space, so BPE can
# merge whole phrases: "go to cabinet 1" is one token in the admissible list and in the response. A
# markup tag such as <action> or </action> stays one piece.
PHRASE_SPLIT = r"</?\w+>|[^\w\s]\s*"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048,
                    phrases: bool = False) -> PreTrainedTokenizerFast:
    """Byte-level BPE with SPECIAL_TOKENS (ids 0, 1, 2); eos = <|im_end|>, pad = <|endoftext|>.

    phrases=False splits words as GPT-2 does. phrases=True splits only at punctuation (PHRASE_SPLIT),
    so frequent multi-word strings (commands, object names) become single tokens: a command is copied
    from the observation token for token, and sequences are ~2x shorter. Either way any text
    round-trips (bytes)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if phrases:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PHRASE_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None,
                                   additional_special_tokens=["<|im_start|>"])


def load_tokenizer(path: str) -> PreTrainedTokenizerFast:
    """The tokenizer saved in a checkpoint folder (models.hf_folder.load_tokenizer); FileNotFoundError
    naming the folder if none."""
    tok, why_not = hf_folder.load_tokenizer(path)
    if tok is None:
        raise FileNotFoundError(why_not)
    return tok


def env_corpus(name: str, seeds: Sequence[int], env_kwargs: dict | None = None, *,
               system_prompt: str | None = None, max_turns: int | None = None,
               template: ChatTemplate = ChatTemplate()) -> list[str]:
    """Text of expert episodes of an environment family as the agent reads it: the chat opening
    (system prompt, first observation), each rendered expert action and each follow-up message
    (observation, admissible actions, turn counter, role markers), laid out by `template` and
    `observation_text` exactly as the rollout lays them out, so the chat scaffolding that repeats in
    every turn gets merged into a few tokens. Special tokens are cut out of the texts (BPE training
    does not know them). `system_prompt` / `max_turns`: as in RolloutConfig (None: the family's)."""
    from prover_jax import envs

    env = envs.make(name, **(env_kwargs or {}))
    spec = env.prompt
    system = spec.system if system_prompt is None else system_prompt
    limit = spec.max_turns if max_turns is None else max_turns
    texts = []
    try:
        for seed in seeds:
            obs, info = env.reset(seed)
            texts.append(template.opening(system, observation_text(obs, info, spec.show_admissible, 0,
                                                                   limit)))
            for turn in range(1, limit + 1):
                action = env.expert_action()
                if action is None:
                    break
                texts.append(env.render_action(action))
                obs, _, done, info = env.step(action)
                if done or turn == limit:
                    break
                texts.append(template.after_response(
                    observation_text(obs, info, spec.show_admissible, turn, limit), response_closed=False))
    finally:
        env.close()
    special = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
    return [piece for text in texts for piece in special.split(text) if piece]

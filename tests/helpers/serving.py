"""A tiny random Qwen3.5 checkpoint with a byte-level tokenizer and a Qwen-style chat template (with
tools and `<tool_call>` blocks), for prover-serve tests and benchmarks (bench/serve.py); and the
household trajectories the judge tests send to it.

Token ids: 0..255 the bytes (GPT-2 byte alphabet), then <|endoftext|>, <|im_start|>, <|im_end|> (EOS)
and the plain added tokens <tool_call>, </tool_call>, <think>, </think>; the model's vocabulary is
padded to VOCAB. Every text is expressible, so grammars (JSON) can always be followed.
"""

from __future__ import annotations

import json
import os

from helpers.hf import make_greedy_checkpoint

VOCAB = 264
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<tool_call>", "</tool_call>", "<think>", "</think>"]
EOS_ID = 258

# Written for these tests in the shape of Qwen's templates: a system turn listing the tools as JSON
# inside <tools></tools>, assistant tool calls as <tool_call> blocks, tool results as user turns.
CHAT_TEMPLATE = """
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You can call functions. Their signatures, inside <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

To call one, reply with {"name": <function name>, "arguments": <arguments object>} inside <tool_call></tool_call>.<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' %}{% if not loop.first %}{{ raise_exception('a system message must come first') }}{% endif %}
{%- elif m.role == 'user' %}<|im_start|>user
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' %}<|im_start|>assistant
{{ m.content or '' }}{% for c in m.tool_calls or [] %}
<tool_call>
{"name": {{ c.function.name | tojson }}, "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def save_tokenizer(path: str, markup_special: bool = False, chat_template: str = CHAT_TEMPLATE):
    """The byte-level tokenizer saved at `path`; `markup_special`: the ADDED tags are special tokens
    (decoding with skip_special_tokens drops them)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from prover_jax.sampling.stops import _byte_decoder

    vocab = dict(sorted(_byte_decoder().items(), key=lambda kv: kv[1]))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL + (ADDED if markup_special else []))
    if not markup_special:
        tok.add_tokens(ADDED)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = chat_template
    fast.save_pretrained(path)
    assert fast.convert_tokens_to_ids("<|im_end|>") == EOS_ID
    return fast


def make_serving_checkpoint(path: str, seed: int = 3) -> str:
    """HF folder: a 2-layer (linear + full attention) random model, its tokenizer and chat template."""
    make_greedy_checkpoint(path, ["linear_attention", "full_attention"], True, seed, vocab_size=VOCAB,
                           eos_token_id=EOS_ID, max_position_embeddings=4096)
    save_tokenizer(path)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [EOS_ID]}, f)
    return path


def judge_traj(steps, success):
    """A household trajectory of (action, observation) turns, as a judge sees it."""
    from prover_jax.rollout.trajectory import Trajectory, Turn

    turns = [Turn(0, 0, f"<action>{a}</action>", a, True, o, 0.0, "stop") for a, o in steps]
    return Trajectory(env="household", seed=1, uid=0, task="Your task is to: put a clean mug in cabinet 1.",
                      turns=turns, snapshots=list(range(len(steps) + 1)), success=success,
                      score=float(success), termination="done")


def serve(folder: str, model: str, **build_kwargs):
    """Generator for a module fixture: yields (checkpoint path, ChatService, ServerThread) of a tiny
    serving checkpoint written under `folder` (float32, prefill pieces of 256), then stops both."""
    from prover_jax.serving.app import create_app
    from prover_jax.serving.service import ServerThread, build_service

    path = make_serving_checkpoint(folder)
    service = build_service(path, served_model_name=model, max_prefill_length=256, dtype="float32", **build_kwargs)
    srv = ServerThread(create_app(service)).start()
    yield path, service, srv
    srv.stop()
    service.worker.stop()


def serve_folder(path: str, model: str, **build_kwargs):
    """Generator for a module fixture: yields (ChatService, openai client) of prover-serve over the
    checkpoint folder `path` (float32), then stops both."""
    import openai

    from prover_jax.serving.app import create_app
    from prover_jax.serving.service import ServerThread, build_service

    service = build_service(path, served_model_name=model, dtype="float32", **build_kwargs)
    srv = ServerThread(create_app(service)).start()
    client = openai.OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0, timeout=600)
    yield service, client
    client.close()
    srv.stop()
    service.worker.stop()


def openai_client(srv):
    """Generator for a module fixture: the official client on `srv` (no retries), then closed."""
    import openai

    c = openai.OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0, timeout=120)
    yield c
    c.close()

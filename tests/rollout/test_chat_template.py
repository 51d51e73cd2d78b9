"""rollout.chat_template=auto: the rollout's layout read from the checkpoint's own template (Qwen3.5's real
vocabulary, Qwen3.5-style templates), turn by turn against `apply_chat_template`, thinking on and off; the
append-only rule where the template drops earlier reasoning; a template that cannot be followed refused."""

import pytest

from prover_jax.envs.pool import EnvPool
from prover_jax.rollout import Rollout, RolloutConfig
from prover_jax.rollout.chat import ChatTemplate
from prover_jax.rollout.template import check, derive, resolve

from helpers.qwen_vocab import qwen3_5_tokenizer

_SYSTEM = "{%- if messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
_PROMPT = ("{%- if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
           "enable_thinking is false %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}")
_TOOL = "<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"

# Every assistant turn rendered with its think block (empty when there was no reasoning): history is
# what was written, so the rollout must equal the rendering token for token.
KEEPING = _SYSTEM + (
    "{%- for m in messages %}{%- if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n<think>\n{{ m.reasoning_content or '' }}\n"
    "</think>\n\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'tool' %}" + _TOOL + "{% endif %}{%- endfor %}") + _PROMPT

# Qwen3's rule: reasoning kept only for assistant turns after the last user message; earlier ones lose
# their think block (not prefix-preserving).
DROPPING = _SYSTEM + (
    "{%- set ns = namespace(last=0) %}{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set ns.last = loop.index0 %}{% endif %}{%- endfor %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}<|im_start|>user\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{% if loop.index0 > ns.last %}<think>\n"
    "{{ m.reasoning_content or '' }}\n</think>\n\n{% endif %}{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'tool' %}" + _TOOL + "{% endif %}{%- endfor %}") + _PROMPT

# Later user turns get another header: the append-only layout cannot write that.
SHIFTING = _SYSTEM + (
    "{%- for m in messages %}{%- if m.role == 'user' %}<|im_start|>user{{ ' again' if loop.index0 > 1 else '' }}\n"
    "{{ m.content }}<|im_end|>\n{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}<|im_end|>\n"
    "{% endif %}{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return qwen3_5_tokenizer(str(tmp_path_factory.mktemp("qwen3_5")))


def with_template(tok, template):
    tok.chat_template = template
    return tok


def test_pieces_from_the_template(qwen):
    off = derive(with_template(qwen, KEEPING), enable_thinking=False)
    assert (off.system, off.user) == ("<|im_start|>system\n", "<|im_start|>user\n")
    assert (off.end, off.newline) == ("<|im_end|>", "\n")
    assert off.assistant == "<|im_start|>assistant\n<think>\n\n</think>\n\n" and off.think_end == ""
    on = derive(qwen, enable_thinking=True)
    assert on.assistant == "<|im_start|>assistant\n<think>\n" and on.think_skip == "\n</think>\n\n"
    assert on.answer("I should look.\n</think>\n\ngo to cabinet 1") == "go to cabinet 1"
    assert on.answer("still thinking") == "" and off.answer("go to cabinet 1") == "go to cabinet 1"


def messages_of(traj, template: ChatTemplate, system: str, tok, thinking: bool, role: str):
    """The conversation before each turn, read back from an expert episode's tokens (its pieces)."""
    head = tok.decode(traj.tokens[:traj.turns[0].start])
    task = head[len(template.system + system + template.end + template.newline + template.user):
                -len(template.end + template.newline + template.assistant)]
    out = [[{"role": "system", "content": system}, {"role": "user", "content": task}]]
    before = template.end + template.newline + (template.user if template.observation is None else template.observation)
    after = (template.end if template.observation_end is None else template.observation_end) + template.newline
    for t, turn in enumerate(traj.turns[:-1]):
        nxt = tok.decode(traj.tokens[turn.end:traj.turns[t + 1].start])
        obs = nxt[len(before):-len(after + template.assistant)]
        reply = {"role": "assistant", "content": template.answer(turn.response)}
        if thinking:
            reply["reasoning_content"] = ""
        out.append(out[-1] + [reply, {"role": role, "content": obs}])
    return out


@pytest.mark.parametrize("role", ["user", "tool"])
@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("name", ["keeping", "dropping"])
def test_rollout_prompts_are_the_templates_rendering_turn_by_turn(qwen, name, thinking, role):
    """An expert household episode (>= 3 turns) laid out from the template, observations as user turns or
    as tool responses: each turn's prompt tokens are apply_chat_template's for the conversation so far;
    with the dropping template and user observations, except the earlier assistant turns' (empty) think
    blocks, which the append-only sequence keeps (tool responses are not user queries: nothing dropped)."""
    tok = with_template(qwen, KEEPING if name == "keeping" else DROPPING)
    template = resolve("auto", thinking, tok, observation_role=role)
    if role == "tool":
        assert template.observation == "<|im_start|>user\n<tool_response>\n"
        assert template.observation_end == "\n</tool_response><|im_end|>"
    with EnvPool("household", 1) as pool:
        traj = Rollout(None, tok, RolloutConfig(template=template)).run(pool, [3], expert=True)[0]
        system = pool.prompt.system
    assert traj.success and traj.num_turns >= 3
    block = "<think>\n\n</think>\n\n"
    for t, messages in enumerate(messages_of(traj, template, system, tok, thinking, role)):
        ours = traj.tokens[:traj.turns[t].start]
        theirs = list(tok.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=True,
                                              enable_thinking=thinking)["input_ids"])
        text = tok.decode(ours)
        if t == 0 or (not thinking and (name == "keeping" or role == "tool")):
            assert ours == theirs, t
        elif name == "keeping" or role == "tool":  # the same text; an empty reasoning after `<think>\n` is
            assert text == tok.decode(theirs), t  # tokenised apart
        else:  # the earlier turns' think blocks are the only difference
            last = text.rindex(template.assistant)
            assert text[:last].replace(block, "") + text[last:] == tok.decode(theirs) and ours != theirs, t
        if t:  # what the rollout wrote after the last response: the template's own tokens
            piece = traj.tokens[traj.turns[t - 1].end:traj.turns[t].start]
            assert theirs[-len(piece):] == piece, t


def test_a_template_that_cannot_be_followed_is_refused_naming_the_token(qwen):
    tok = with_template(qwen, SHIFTING)
    with pytest.raises(ValueError, match=r"at token \d+ of turn 2's prompt .* writes '\\n' .* where the template "
                                         r"writes ' again'"):
        resolve("auto", False, tok)
    with pytest.raises(ValueError, match="enable_thinking=True needs"):
        resolve("auto", True, tok)  # no think block to open
    assert resolve("chatml", False, tok) == ChatTemplate()


def test_chatml_for_a_tokenizer_without_a_template_and_bad_choices(qwen, household_tokenizer):
    assert resolve("auto", False, household_tokenizer) == ChatTemplate()
    with pytest.raises(ValueError, match="observation_role='tool' needs the checkpoint's own template"):
        resolve("chatml", False, qwen, observation_role="tool")
    with pytest.raises(ValueError, match="rollout.observation_role: unknown 'system'"):
        resolve("auto", False, with_template(qwen, KEEPING), observation_role="system")
    with pytest.raises(ValueError, match="rollout.chat_template: unknown 'jinja'"):
        resolve("jinja", False, qwen)
    with pytest.raises(ValueError, match="enable_thinking=True needs"):
        resolve("auto", True, household_tokenizer)


def test_the_check_runs_three_turns_and_the_builtin_chatml_follows_chatml_templates(qwen):
    from helpers.serving import CHAT_TEMPLATE  # ChatML-shaped, no think block

    tok = with_template(qwen, CHAT_TEMPLATE)
    template = resolve("auto", False, tok)
    assert template == ChatTemplate()
    check(tok, template, False, turns=4)

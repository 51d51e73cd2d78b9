"""The trained tokenizer of built-in policies: any text round-trips, the special tokens have fixed
ids, and with phrases=True a command is the same single token in the admissible list and in the
response (what a small policy copies), with sequences much shorter than word-level BPE; the corpus
is the agent's view of expert episodes, chat scaffolding included."""

import pytest

from prover_jax.rollout import env_corpus, load_tokenizer, train_tokenizer

KW = dict(task_type="pick_and_place", max_turns=8, expert_turns=(3, 5), num_receptacles=4, num_objects=3)


@pytest.fixture(scope="module")
def corpus():
    return env_corpus("household", range(100), KW)


@pytest.mark.parametrize("phrases", [False, True])
def test_round_trip_and_specials(corpus, phrases, tmp_path):
    tok = train_tokenizer(corpus, vocab_size=1024, phrases=phrases)
    assert [tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [0, 1, 2]
    for text in ["héllo wörld ✓ <action>go to  cabinet 1</action>\n\n", "", "   ", "1,2,,3..", corpus[5],
                 "<|im_start|>user\nhi<|im_end|>\n"]:
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    tok.save_pretrained(tmp_path)
    again = load_tokenizer(str(tmp_path))
    assert again.encode(corpus[7], add_special_tokens=False) == tok.encode(corpus[7], add_special_tokens=False)


def test_phrases_make_commands_single_copyable_tokens(corpus):
    words = train_tokenizer(corpus, vocab_size=1024, phrases=False)
    phrases = train_tokenizer(corpus, vocab_size=1024, phrases=True)
    enc = lambda tok, s: tok.encode(s, add_special_tokens=False)
    admissible = "Admissible actions: go to cabinet 1, go to drawer 1, inventory, look."
    [cmd] = [t for t in enc(phrases, admissible) if phrases.decode([t]) == "go to drawer 1"]
    assert cmd in enc(phrases, "<action>go to drawer 1</action>")  # the very token of the list
    assert len(enc(words, "go to drawer 1")) > 1
    n_words = sum(len(enc(words, t)) for t in corpus)
    n_phrases = sum(len(enc(phrases, t)) for t in corpus)
    assert n_phrases < 0.6 * n_words


def test_corpus_is_the_agents_view_so_the_scaffolding_is_cheap(corpus):
    """The corpus holds the chat as the rollout lays it out (role headers, admissible list, turn
    counter, action tags), so that scaffolding, repeated every turn, costs a token or two."""
    assert not any(s in text for text in corpus for s in ("<|im_start|>", "<|im_end|>"))
    assert any(text.startswith("user\n") for text in corpus)
    assert any("Admissible actions: " in text and "[turn 2 of 8]" in text for text in corpus)
    tok = train_tokenizer(corpus, vocab_size=1024, phrases=True)
    enc = lambda s: tok.encode(s, add_special_tokens=False)
    assert len(enc("<action>")) == len(enc("</action>")) == len(enc("Admissible actions")) == 1
    assert len(enc("assistant\n")) == 1
    response = enc("<action>go to drawer 1</action>")
    assert [tok.decode([t]) for t in response] == ["<action>", "go to drawer 1", "</action>"]

"""prover-generate: greedy output equals transformers' generate; EOS / stop strings / samples / seeds /
benchmark behave; prover orbax checkpoints work; bad input is one line on stderr, no traceback."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from absl import flags

from prover_jax.convert import save_checkpoint
from prover_jax.models import qwen3_5
from prover_jax.sampling import cli

from helpers.hf import (LOGPROB_TOL, MIN_GAP, TINY, hf_greedy, log_softmax_at, make_greedy_checkpoint,
                        word_tokenizer)

L, A = "linear_attention", "full_attention"
N_NEW = 10
PROMPTS = [[5, 17, 33, 8, 71], [90, 2, 44, 61, 12, 3, 7]]  # one prefill bucket: fewer compilations


def text(ids):
    return " ".join("<unk>" if i == 0 else "<eos>" if i == 1 else f"w{i}" for i in ids)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """(HF folder with tokenizer, HF greedy references [(tokens, logits)] of PROMPTS, (eos, k0), (stop,
    k1)): prompt 0 first produces the extra EOS id at k0, prompt 1 the stop word at k1, 2 <= k < N_NEW."""
    path = str(tmp_path_factory.mktemp("hf"))
    hf = make_greedy_checkpoint(path, [L, L, L, A], True, 3)
    refs = [hf_greedy(hf, np.asarray(p), N_NEW) for p in PROMPTS]
    for tokens, logits in refs:
        top2 = np.sort(logits, axis=-1)[:, -2:]
        assert np.min(top2[:, 1] - top2[:, 0]) > MIN_GAP and 1 not in tokens.tolist()
    t0, t1 = refs[0][0].tolist(), refs[1][0].tolist()
    k0 = next(k for k in range(2, N_NEW - 1) if t0[k] not in t0[:k] + t1)
    k1 = next(k for k in range(2, N_NEW - 1) if f"w{t1[k]}" not in text(t1[:k]) + text(t0[:k0 + 1]))
    word_tokenizer(path)
    # EOS ids: 1 from config.json, plus t0[k0] from generation_config.json
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [1, t0[k0]]}, f)
    return path, refs, (t0[k0], k0), (f"w{t1[k1]}", k1)


def run_cli(capsys, *args):
    """(exit status, parsed stdout lines, stderr) of an in-process prover-generate run."""
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["prover-generate", *args])
    try:
        code = cli.main(["prover-generate"])
    finally:
        flags.FLAGS.unparse_flags()
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.strip()], err


def prompt_ids(prompts):
    return "--prompt_ids=" + ";".join(",".join(map(str, p)) for p in prompts)


def test_greedy_matches_transformers(ckpt, capsys):
    path, refs, _, _ = ckpt
    code, lines, err = run_cli(capsys, f"--model={path}", prompt_ids(PROMPTS),
                               f"--max_new_tokens={N_NEW}", "--ignore_eos", "--max_concurrent_decodes=1")
    assert code == 0, err
    assert [(x["prompt_index"], x["sample_index"]) for x in lines] == [(0, 0), (1, 0)]
    for line, (tokens, logits) in zip(lines, refs):
        assert line["tokens"] == tokens.tolist() and line["finish_reason"] == "length"
        np.testing.assert_allclose(line["logprobs"], log_softmax_at(logits, tokens), atol=LOGPROB_TOL,
                                   rtol=0)
        assert line["text"] == text(tokens)


def test_eos_ids_and_stop_strings(ckpt, capsys):
    path, refs, (eos, k0), (stop, k1) = ckpt
    code, lines, err = run_cli(capsys, f"--model={path}", prompt_ids(PROMPTS),
                               f"--max_new_tokens={N_NEW}", f"--stop={stop}", "--stop=never seen")
    assert code == 0, err
    # the token that ends a sample is kept as its last token
    assert lines[0]["tokens"] == refs[0][0][:k0 + 1].tolist() and lines[0]["finish_reason"] == "stop"
    assert lines[1]["tokens"] == refs[1][0][:k1 + 1].tolist() and lines[1]["finish_reason"] == "stop"
    assert lines[1]["text"].endswith(stop) and len(lines[1]["logprobs"]) == k1 + 1


def test_samples_seeds_and_benchmark(ckpt, capsys):
    path = ckpt[0]
    common = [f"--model={path}", "--temperature=1", "--top_p=0.95", "--num_samples=3",
              "--max_new_tokens=6", "--ignore_eos"]
    code, lines, err = run_cli(capsys, *common, prompt_ids(PROMPTS), "--seed=4", "--benchmark")
    assert code == 0, err
    bench, lines = lines[-1], lines[:-1]
    assert [(x["prompt_index"], x["sample_index"]) for x in lines] == [(i, j) for i in (0, 1)
                                                                       for j in range(3)]
    for x in lines:
        assert len(x["tokens"]) == len(x["logprobs"]) == 6 and max(x["logprobs"]) <= 0
        assert all(0 <= t < TINY["vocab_size"] for t in x["tokens"])
    assert len({tuple(x["tokens"]) for x in lines}) == 6  # samples differ
    assert set(bench) >= {"generated_tokens", "seconds", "tokens_per_s"}
    assert bench["generated_tokens"] == 36 and bench["seconds"] > 0
    assert bench["tokens_per_s"] == pytest.approx(36 / bench["seconds"], rel=1e-3)
    # prompt 1 uses seed + 1: alone with --seed=5 it gives the same samples
    code, alone, err = run_cli(capsys, *common, prompt_ids(PROMPTS[1:]), "--seed=5")
    assert code == 0, err
    assert [x["tokens"] for x in alone] == [x["tokens"] for x in lines[3:]]
    np.testing.assert_allclose([x["logprobs"] for x in alone], [x["logprobs"] for x in lines[3:]],
                               atol=1e-5)


def test_prover_checkpoint_and_text_prompt(ckpt, capsys, tmp_path):
    path, refs, _, _ = ckpt
    out = str(tmp_path / "ckpt")
    save_checkpoint(qwen3_5.load_hf(path), out)  # copies the tokenizer files too
    code, lines, err = run_cli(capsys, f"--model={out}", f"--prompt={text(PROMPTS[1])}",
                               f"--max_new_tokens={N_NEW}", "--ignore_eos")
    assert code == 0, err
    [line] = lines
    assert line["tokens"] == refs[1][0].tolist() and line["text"] == text(refs[1][0])


def test_bad_input(ckpt, capsys, tmp_path):
    path = ckpt[0]
    bare = tmp_path / "bare"  # config.json only: no tokenizer
    bare.mkdir()
    shutil.copy(os.path.join(path, "config.json"), bare / "config.json")
    cases = [
        ([f"--model={path}", "--prompt_ids=1,x;2"], 2, "not an integer"),
        ([f"--model={path}", "--prompt_ids=1,2;"], 2, "prompt 1 is empty"),
        ([f"--model={path}", "--prompt_ids=3,96;4"], 2, "outside the vocabulary"),
        ([f"--model={tmp_path / 'missing'}", "--prompt_ids=1"], 1, "no such folder"),
        ([f"--model={bare}", "--prompt=w3"], 2, "needs a tokenizer"),
        ([f"--model={bare}", "--prompt_ids=3", "--stop=x"], 2, "needs a tokenizer"),
        ([f"--model={path}"], 2, "exactly one of"),
        ([f"--model={path}", "--prompt_ids=3", "--temperature=-1"], 2, "temperature"),
        ([f"--model={path}", "--prompt_ids=3", "--num_samples=0"], 2, "num_samples"),
        ([f"--model={bare}", "--prompt_ids=3"], 1, "cannot load model"),  # no weights
    ]
    for args, want_code, message in cases:
        code, lines, err = run_cli(capsys, *args)
        assert (code, lines) == (want_code, []), (args, err)
        assert len(err.strip().splitlines()) == 1 and message in err, (args, err)


def test_subprocess(ckpt):
    path, refs, _, _ = ckpt
    cmd = [sys.executable, "-m", "prover_jax.sampling.cli", f"--model={path}"]
    bad = subprocess.run(cmd + ["--prompt_ids=1;;2"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == "prover-generate: error: --prompt_ids: prompt 1 is empty (in '1;;2')"
    good = subprocess.run(cmd + [prompt_ids(PROMPTS[1:]), "--max_new_tokens=4", "--ignore_eos",
                                 "--dtype=bfloat16"], capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stderr[-2000:]
    [line] = [json.loads(x) for x in good.stdout.splitlines()]
    assert len(line["tokens"]) == len(line["logprobs"]) == 4 and line["finish_reason"] == "length"
    assert line["text"] == text(line["tokens"])
    top2 = np.sort(refs[1][1][0])[-2:]
    assert top2[1] - top2[0] > 0.2  # fp32 top-2 gap of the first token: bf16 cannot flip it
    assert line["tokens"][0] == int(refs[1][0][0])

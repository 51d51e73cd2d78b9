"""`prover-convert --ckpt=WORKDIR --out_hf`: the export of a training run carries the source folder's
generation_config.json and stored dtypes, as `prover-train --export_hf` does."""

import json

import torch
from etils import epath
from flax import nnx
from safetensors.torch import load_file

from prover_jax.convert.orbax_io import MODEL_DIR, load_train_checkpoint
from prover_jax.models import qwen3_5
from prover_jax.models.hf_folder import load_tokenizer
from prover_jax.training.build import write_model_dir
from prover_jax.training.checkpoints import Checkpoints

from helpers import hf as F

L, A = "linear_attention", "full_attention"
GEN = {"eos_token_id": [1, 5], "temperature": 0.6, "top_p": 0.95, "do_sample": True}


def test_workdir_export_keeps_generation_config_and_dtypes(tmp_path):
    src, work, out = tmp_path / "src", tmp_path / "W", tmp_path / "out"
    F.make_text_checkpoint(src, [L, A], tied=True, dtype=torch.bfloat16)
    F.word_tokenizer(src)
    (src / "generation_config.json").write_text(json.dumps(GEN))
    net = qwen3_5.load_hf(str(src))
    tok, why = load_tokenizer(str(src))
    assert tok is not None, why
    write_model_dir(epath.Path(work) / MODEL_DIR, net, tok)
    ckpts = Checkpoints(epath.Path(work) / "checkpoints", keep=1)
    ckpts.save(3, {"params": nnx.state(net, nnx.Param)}, {})
    ckpts.close()

    qwen3_5.save_hf(load_train_checkpoint(str(work)), str(out))
    assert json.loads((out / "generation_config.json").read_text()) == GEN
    a, b = load_file(src / "model.safetensors"), load_file(out / "model.safetensors")
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k

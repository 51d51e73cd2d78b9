"""prover-convert: HF folder <-> prover orbax checkpoint.

    prover-convert --hf_dir=HF --out=CKPT        # HF safetensors -> orbax
    prover-convert --ckpt=CKPT --out_hf=HF [--dtype=bfloat16]   # orbax -> HF safetensors
    prover-convert --ckpt=WORKDIR --out_hf=HF [--step=N]         # a prover-train run (any host count)
    prover-convert --ckpt=WORKDIR --out_peft=DIR [--step=N]      # a LoRA run's adapters, as an HF PEFT folder

Both directions stream tensor by tensor: peak host memory is about one copy of the params.
A folder that cannot be read or written exits with status 1 and one line on stderr naming it.
"""

from __future__ import annotations

import sys
import time

import jax.numpy as jnp
from absl import app, flags

from prover_jax.convert.orbax_io import (MODEL_DIR, is_train_workdir, load_checkpoint, load_train_adapters,
                                        load_train_checkpoint, save_checkpoint)
from prover_jax.models import family_for, load_hf, save_hf

FLAGS = flags.FLAGS
flags.DEFINE_string("hf_dir", None, "HF checkpoint folder to import.")
flags.DEFINE_string("out", None, "Where to write the prover (orbax) checkpoint.")
flags.DEFINE_string("ckpt", None, "Prover checkpoint folder, or a prover-train workdir, to export.")
flags.DEFINE_integer("step", None, "With a prover-train workdir: the checkpoint step (default: newest).")
flags.DEFINE_string("out_hf", None, "Where to write the HF checkpoint (weight files already there are "
                    "replaced; other files stay).")
flags.DEFINE_string("out_peft", None, "With a LoRA prover-train workdir: where to write its adapters as an "
                    "HF PEFT folder (adapter_model.safetensors + adapter_config.json).")
flags.DEFINE_string("dtype", None, "Export dtype (e.g. bfloat16); default keeps each tensor's source "
                    "dtype.")
flags.DEFINE_integer("max_shard_mb", 5120, "Largest safetensors file written on export, in MiB.")


def main(argv):
    del argv
    if FLAGS.dtype is not None:
        try:
            jnp.dtype(FLAGS.dtype)
        except TypeError:
            raise app.UsageError(f"--dtype: {FLAGS.dtype!r} is not a dtype (e.g. bfloat16, float32)") from None
    try:
        convert()
    except (OSError, ValueError) as e:
        print(f"prover-convert: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              file=sys.stderr)
        sys.exit(1)


def convert() -> None:
    """The conversion the flags ask for."""
    t0 = time.time()
    if FLAGS.hf_dir and FLAGS.out and not (FLAGS.ckpt or FLAGS.out_hf):
        model = load_hf(FLAGS.hf_dir, dtype=jnp.float32)
        save_checkpoint(model, FLAGS.out)
        print(f"wrote {FLAGS.out} ({model.config.param_count():,} params) in {time.time() - t0:.1f}s")
    elif FLAGS.ckpt and FLAGS.out_hf and not (FLAGS.hf_dir or FLAGS.out):
        model = (load_train_checkpoint(FLAGS.ckpt, FLAGS.step) if is_train_workdir(FLAGS.ckpt)
                 else load_checkpoint(FLAGS.ckpt))
        save_hf(model, FLAGS.out_hf, dtype=FLAGS.dtype and jnp.dtype(FLAGS.dtype),
                max_shard_bytes=FLAGS.max_shard_mb * 2 ** 20)
        print(f"wrote {FLAGS.out_hf} in {time.time() - t0:.1f}s")
    elif FLAGS.ckpt and FLAGS.out_peft and not (FLAGS.hf_dir or FLAGS.out or FLAGS.out_hf):
        import json

        from etils import epath

        from prover_jax.models.lora import LoraSpec, adapter_count, write_peft
        spec_json, adapters = load_train_adapters(FLAGS.ckpt, FLAGS.step)
        spec = LoraSpec.from_json(spec_json)
        family = family_for(json.loads((epath.Path(FLAGS.ckpt) / MODEL_DIR / "config.json").read_text()))
        write_peft(FLAGS.out_peft, adapters, spec, base_model=spec_json.get("base_model", ""),
                   path_to_hf=family.path_to_hf)
        print(f"wrote {FLAGS.out_peft} ({adapter_count(adapters)} adapted projections, rank {spec.rank}) "
              f"in {time.time() - t0:.1f}s")
    else:
        raise app.UsageError("give either --hf_dir and --out, or --ckpt and --out_hf, or --ckpt and --out_peft")


def run():
    app.run(main)


if __name__ == "__main__":
    run()

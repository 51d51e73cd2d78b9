"""A prover model checkpoint: `config.json` (HF text config) + `source.json` (tensor dtypes, source
folder) + tokenizer files + `params/` (orbax, one entry per parameter).

Restore builds the abstract model first and restores each parameter straight into its sharding, so no
host ever holds an unsharded copy of a model that a mesh shards.
"""

from __future__ import annotations

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from prover_jax.models import read_config
from prover_jax.models.hf_folder import TOKENIZER_FILES, HFSource

PARAMS_DIR = "params"
LORA_FILE = "lora.json"  # in a LoRA run's W/model: model.lora and the base model's path
SOURCE_FILE = "source.json"  # a model's HFSource: its source folder and each tensor's stored dtype


def is_prover_checkpoint(path: str) -> bool:
    return os.path.isdir(os.path.join(path, PARAMS_DIR)) and os.path.isfile(
        os.path.join(path, "config.json"))


def save_checkpoint(model: nnx.Module, path: str) -> None:
    """Writes `model` (params as stored, e.g. fp32) to a prover checkpoint folder."""
    path = os.path.abspath(path)
    if os.path.exists(os.path.join(path, PARAMS_DIR)):
        raise FileExistsError(f"{path} already holds a checkpoint; choose another --out")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(model.config.to_hf_dict(), f, indent=2)
    write_source(path, model)
    src = getattr(model, "hf_source", None)
    if src is not None:
        for name in TOKENIZER_FILES:
            p = os.path.join(src.path, name)
            if os.path.isfile(p):
                shutil.copy(p, os.path.join(path, name))
    state = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(os.path.join(path, PARAMS_DIR), state)


def write_source(folder: str, model: nnx.Module) -> None:
    """`folder`/source.json: the model's HFSource (path None, no dtypes for a model not loaded from one)."""
    src = getattr(model, "hf_source", None)
    with open(os.path.join(folder, SOURCE_FILE), "w") as f:
        json.dump({"path": src.path if src else None, "dtypes": dict(src.dtypes) if src else {}}, f,
                  indent=2)


def source_dtypes(folder: str) -> tuple[tuple[str, str], ...]:
    """The stored dtypes of `folder`/source.json, as HFSource.dtypes (() without the file)."""
    p = os.path.join(folder, SOURCE_FILE)
    if not os.path.isfile(p):
        return ()
    with open(p) as f:
        return tuple(sorted(json.load(f).get("dtypes", {}).items()))


def load_checkpoint(path: str, dtype=jnp.float32, mesh=None, compute_dtype=None, runtime=None) -> nnx.Module:
    """Restores a prover checkpoint into a model of its config.json's family (params cast to `dtype`,
    computing in `compute_dtype` (None: dtype), sharded over `mesh`, running per `runtime`: None, the
    family's default)."""
    path = os.path.abspath(path)
    if not is_prover_checkpoint(path):
        raise FileNotFoundError(f"{path} is not a prover checkpoint (needs config.json and {PARAMS_DIR}/)")
    fam, cfg = read_config(path)
    compute_dtype = dtype if compute_dtype is None else compute_dtype
    abstract = fam.abstract_model(cfg, dtype=compute_dtype, param_dtype=dtype, mesh=mesh, runtime=runtime)
    graphdef, abs_state = nnx.split(abstract)
    shardings = fam.param_shardings(abstract, mesh) if mesh is not None else None
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    flat = {}
    for p, var in nnx.to_flat_state(abs_state):
        key = ".".join(str(x) for x in p)
        v = var.get_value()
        flat[p] = jax.ShapeDtypeStruct(v.shape, v.dtype,
                                       sharding=shardings[key] if shardings else device)
    target = _replace_leaves(nnx.to_pure_dict(abs_state), flat)
    try:
        with ocp.StandardCheckpointer() as ckptr:
            restored = ckptr.restore(os.path.join(path, PARAMS_DIR), target)
    except Exception as e:
        raise ValueError(f"cannot restore parameters from {path}/{PARAMS_DIR}: {e}") from None
    nnx.replace_by_pure_dict(abs_state, restored)
    model = nnx.merge(graphdef, abs_state)
    model.hf_source = HFSource(path, source_dtypes(path))
    return model


# W/model (training.build.write_model_dir): the trainer's architecture (config.json), tokenizer files,
# generation_config.json and source.json of the policy's source folder
MODEL_DIR = "model"


def is_train_workdir(path: str) -> bool:
    """A `prover-train` workdir: W/checkpoints/<step> and W/model/config.json."""
    from etils import epath
    p = epath.Path(path)
    return (p / "checkpoints").is_dir() and (p / MODEL_DIR / "config.json").exists()


def load_train_checkpoint(workdir: str, step: int | None = None, dtype=jnp.float32) -> nnx.Module:
    """The policy of a `prover-train` checkpoint (the newest, or `step`), restored on ONE host from
    the shards every process of a (multi-host) run wrote; only the params are read. Its hf_source is
    W/model (tokenizer files, generation_config.json) with the source dtypes of W/model/source.json, so
    `save_hf` writes what `prover-train --export_hf` does."""
    from etils import epath
    root = epath.Path(workdir)
    if (root / MODEL_DIR / LORA_FILE).exists():
        raise ValueError(f"{workdir} is a LoRA run: its checkpoints hold the adapters only; export them with "
                         "--out_peft (or the merged policy with prover-train --export_hf)")
    step = _checkpoint_step(root, step)
    local = os.fspath(root / MODEL_DIR) if "://" not in os.fspath(root) else None
    if local is None:
        import tempfile
        local = tempfile.mkdtemp(prefix="prover-model-")
        for f in (root / MODEL_DIR).iterdir():
            (epath.Path(local) / f.name).write_bytes(f.read_bytes())
    fam, cfg = read_config(local)
    abstract = fam.abstract_model(cfg, dtype=dtype, param_dtype=dtype)
    graphdef, abs_params = nnx.split(abstract, nnx.Param)
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=device), abs_params)
    ckptr = ocp.PyTreeCheckpointer()
    try:
        restored = ckptr.restore(root / "checkpoints" / str(step) / "state", args=ocp.args.PyTreeRestore(
            item={"params": target}, restore_args={"params": jax.tree.map(
                lambda x: ocp.ArrayRestoreArgs(sharding=device, dtype=dtype), target)},
            partial_restore=True))
    except Exception as e:
        raise ValueError(f"cannot restore the params of step {step} from {root}/checkpoints: "
                         f"{str(e).splitlines()[0][:300]}") from None
    model = nnx.merge(graphdef, restored["params"])
    model.hf_source = HFSource(local, source_dtypes(local))
    return model


def _checkpoint_step(root, step: int | None) -> int:
    """The newest complete checkpoint step of a train workdir, or `step` if it exists."""
    with ocp.CheckpointManager(root / "checkpoints") as manager:
        steps = manager.all_steps()
    if not steps:
        raise FileNotFoundError(f"{root}/checkpoints holds no complete checkpoint")
    step = max(steps) if step is None else int(step)
    if step not in steps:
        raise FileNotFoundError(f"no checkpoint of step {step} in {root}/checkpoints; have {sorted(steps)}")
    return step


def load_train_adapters(workdir: str, step: int | None = None) -> tuple[dict, dict]:
    """(W/model/lora.json, {path: array} of the LoRA adapters) of a LoRA `prover-train` checkpoint
    (the newest, or `step`), read on one host."""
    from etils import epath
    root = epath.Path(workdir)
    spec_file = root / MODEL_DIR / LORA_FILE
    if not spec_file.exists():
        raise FileNotFoundError(f"{spec_file} not found: {workdir} is not a LoRA run (model.lora.rank = 0)")
    step = _checkpoint_step(root, step)
    state = ocp.PyTreeCheckpointer().restore(root / "checkpoints" / str(step) / "state")
    flat = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state["params"])[0]:
        keys = tuple(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        flat[keys[:-1] if keys[-1] == "value" else keys] = np.asarray(leaf)
    return json.loads(spec_file.read_text()), flat


def _replace_leaves(tree: dict, flat: dict, prefix=()):
    out = {}
    for k, v in tree.items():
        key = prefix + (k,)
        out[k] = _replace_leaves(v, flat, key) if isinstance(v, dict) else flat[key]
    return out

"""A simulated 2-host pod: two `prover-train` processes on localhost (gloo collectives, 4 CPU devices
each, one fsdp=8 mesh over both) against one process with 8 devices.

- both processes exit 0, metrics.jsonl holds each step once, the exported HF folder loads in
  transformers, and the workdir given as file://... round-trips checkpoints and metrics;
- the same config on ONE process plays the same tasks with the same seeds: equal step-1 loss;
- killing one process makes the other exit with an error within a timeout, and a re-launch of
  both resumes from the last complete checkpoint;
- bad layouts fail at once with one error naming both numbers.

The policy starts from a short SFT on the fixed task set (trained once here, on one device), so
groups are mixed and ProVer's verifier runs in every launch.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers import TEST_XLA_FLAGS
from helpers.demo_config import PATH as DEMO_CONFIG
from helpers.demo_config import pod_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = DEMO_CONFIG + ":pod"  # the file every launch reads, and its variant
LAUNCH_TIMEOUT_S = 400
# one-process launches reuse compiled programs (jax's persistent compilation cache); CPU processes of a
# pod compile their own (distributed.initialize turns the cache off there: read back, the train step hangs)
CACHE_DIR = os.path.join(os.environ.get("PYTEST_CACHE_ROOT", "/tmp"), f"prover-jax-cache-{os.getpid()}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_rows(workdir: str) -> list[dict]:
    return [r for r in rows(workdir) if "loss" in r]


def flags(workdir: str, policy: str, steps: int, *extra: str) -> list[str]:
    return [f"--config={CONFIG}", f"--workdir={workdir}", "--noprogress",
            "--config.model.init=checkpoint", f"--config.model.path={policy}", "--config.sft.steps=0",
            f"--config.train.steps={steps}", *extra]


def start(n: int, devices_each: int, args: list[str], log_dir: str) -> list[subprocess.Popen]:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_each} {TEST_XLA_FLAGS}",
           "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", "JAX_COMPILATION_CACHE_DIR": CACHE_DIR,
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
    port = free_port()
    procs = []
    for i in range(n):
        dist = [] if n == 1 else [f"--coordinator_address=127.0.0.1:{port}", f"--num_processes={n}",
                                  f"--process_id={i}", "--distributed_timeout_s=10"]
        log = open(os.path.join(log_dir, f"process{i}.log"), "w")
        procs.append(subprocess.Popen([sys.executable, "-m", "prover_jax.training.cli", *args, *dist],
                                      stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT))
    return procs


def wait_all(procs, timeout=LAUNCH_TIMEOUT_S) -> list[int]:
    deadline = time.time() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(deadline - time.time(), 1)))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"a process did not finish within {timeout} s (hang)")
    return codes


def log_text(log_dir: str, i: int) -> str:
    with open(os.path.join(log_dir, f"process{i}.log")) as f:
        return f.read()


def launch(n, devices_each, args, log_dir) -> list[int]:
    os.makedirs(log_dir, exist_ok=True)
    return wait_all(start(n, devices_each, args, log_dir))


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The SFT warm start of the pod config on one device, saved as a prover checkpoint."""
    from flax import nnx

    from prover_jax.convert.orbax_io import save_checkpoint
    from prover_jax.training.trainer import Trainer

    c = pod_config()
    c.mesh.fsdp = 1
    c.credit.method = "grpo"
    base = tmp_path_factory.mktemp("policy")
    t = Trainer(c, str(base / "sft"))
    try:
        t.run_sft()
        out = str(base / "ckpt")
        save_checkpoint(nnx.merge(t.run.graphdef, t.state.params), out)
        t.run.tokenizer.save_pretrained(out)
    finally:
        t.close()
    return out


@pytest.fixture(scope="module")
def pod_run(policy, tmp_path_factory):
    """Two processes x 4 devices, 2 RL steps, HF export; workdir given as file://."""
    base = tmp_path_factory.mktemp("pod")
    workdir, hf = str(base / "run"), str(base / "hf")
    t0 = time.time()
    codes = launch(2, 4, flags(f"file://{workdir}", policy, 2, f"--export_hf={hf}"), str(base / "logs"))
    seconds = time.time() - t0
    assert codes == [0, 0], log_text(str(base / "logs"), codes.index(next(c for c in codes if c))) \
        if any(codes) else codes
    return {"workdir": workdir, "hf": hf, "logs": str(base / "logs"), "seconds": seconds}


def test_two_processes_train_checkpoint_and_export(pod_run):
    workdir = pod_run["workdir"]
    got = train_rows(workdir)
    assert [r["step"] for r in got] == [1, 2]
    assert all(r["episodes"] == 8 for r in got)  # both processes' episodes counted once
    assert sum(r["prover/valid_proposals"] for r in got) > 0, "the verifier never ran"
    assert sum(r["prover/verify_policy_tokens"] for r in got) > 0
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2"]
    with open(os.path.join(workdir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["rl_steps"] == 2 and os.path.exists(os.path.join(workdir, "progress.png"))
    print(f"2-process launch: {pod_run['seconds']:.1f} s")

    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(pod_run["hf"])
    tok = transformers.AutoTokenizer.from_pretrained(pod_run["hf"])
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode("go to drawer 1")])).logits
    assert torch.isfinite(logits).all()


def test_prover_convert_exports_the_multihost_checkpoint(pod_run, tmp_path):
    """prover-convert --ckpt=WORKDIR restores the 2-process run's shards on one host: the same tensors
    as the run's own --export_hf (taken after the last step, which is the last checkpoint)."""
    from safetensors.numpy import load_file
    out = str(tmp_path / "hf")
    proc = subprocess.run([sys.executable, "-m", "prover_jax.convert.cli", f"--ckpt={pod_run['workdir']}",
                           f"--out_hf={out}"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    a = load_file(os.path.join(out, "model.safetensors"))
    b = load_file(os.path.join(pod_run["hf"], "model.safetensors"))
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert os.path.exists(os.path.join(out, "tokenizer.json"))


def test_one_process_plays_the_same_tasks_with_the_same_loss(pod_run, policy, tmp_path):
    workdir = str(tmp_path / "one")
    assert launch(1, 8, flags(workdir, policy, 1), str(tmp_path / "logs")) == [0], \
        log_text(str(tmp_path / "logs"), 0)
    one, two = train_rows(workdir)[0], train_rows(pod_run["workdir"])[0]
    assert one["tasks"] == two["tasks"]
    for key in ("success_rate", "policy_tokens", "prover/valid_proposals", "prover/accepted"):
        assert one[key] == two[key], key
    # the tokens of the continuations kept are fixed by their seeds; a speculative continuation
    # cancelled when its group's real plan came in had decoded as far as it got by then (timing)
    kept = [r["prover/verify_policy_tokens"] - r["prover/cancelled_tokens"] for r in (one, two)]
    assert kept[0] == kept[1] > 0, kept
    print(f"step-1 loss: 1 process {one['loss']:.8f}, 2 processes {two['loss']:.8f}, "
          f"|diff| = {abs(one['loss'] - two['loss']):.2e}")
    assert abs(one["loss"] - two["loss"]) <= 1e-4
    assert abs(one["grad_norm"] - two["grad_norm"]) <= 1e-4 * max(1.0, one["grad_norm"])


def test_killed_process_stops_its_peer_and_both_resume(pod_run, policy, tmp_path):
    workdir = str(tmp_path / "run")
    shutil.copytree(pod_run["workdir"], workdir)
    logs = str(tmp_path / "logs")
    os.makedirs(logs)
    procs = start(2, 4, flags(workdir, policy, 4), logs)
    deadline = time.time() + LAUNCH_TIMEOUT_S
    while not any(r["step"] == 3 for r in train_rows(workdir)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), log_text(logs, 0)
        time.sleep(0.2)
    procs[1].send_signal(signal.SIGKILL)
    t_kill = time.time()
    try:
        code = procs[0].wait(timeout=120)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        raise AssertionError("the surviving process hung after its peer was killed")
    waited = time.time() - t_kill
    print(f"survivor exited {code} {waited:.1f} s after its peer was killed")
    assert code != 0
    text = log_text(logs, 0)
    assert any(w in text for w in ("heartbeat", "Gloo", "gloo", "coordination", "distributed")), text[-3000:]

    logs2 = str(tmp_path / "logs2")
    assert launch(2, 4, flags(workdir, policy, 4), logs2) == [0, 0], log_text(logs2, 0)[-5000:]
    steps = [r["step"] for r in train_rows(workdir)]
    assert steps == [1, 2, 3, 4], steps
    assert "resumed from" in log_text(logs2, 0)


def test_bad_layouts_fail_at_once_naming_both_numbers(policy, tmp_path):
    for extra, words in ((["--config.mesh.fsdp=3"], ("(1, 3, 1)", "8 devices")),
                         (["--config.rollout.groups_per_step=3"], ("groups_per_step=3", "2 processes"))):
        logs = str(tmp_path / extra[0].split(".")[-1].split("=")[0])
        codes = launch(2, 4, flags(str(tmp_path / "bad"), policy, 1, *extra), logs)
        assert codes[0] != 0 and codes[1] != 0
        for i in range(2):
            text = log_text(logs, i)
            assert all(w in text for w in words), text[-2000:]


def corrupt(step_dir: str) -> int:
    """Overwrites the array data files of a checkpoint step (as a truncated copy or a bad disk would)."""
    n = 0
    for top, _, files in os.walk(os.path.join(step_dir, "state")):
        if os.path.basename(top) == "d":
            for name in files:
                path = os.path.join(top, name)
                size = os.path.getsize(path)
                with open(path, "wb") as f:
                    f.write(np.random.default_rng(n).integers(0, 256, size, np.uint8).tobytes())
                n += 1
    return n


def test_corrupt_latest_checkpoint_errors_then_resumes_from_previous(pod_run, policy, tmp_path):
    """A checkpoint written by the 2-process run, restored by one process on one device."""
    from prover_jax.training.checkpoints import CorruptCheckpointError
    from prover_jax.training.trainer import Trainer

    workdir = str(tmp_path / "run")
    shutil.copytree(pod_run["workdir"], workdir)
    assert corrupt(os.path.join(workdir, "checkpoints", "2")) > 0
    c = pod_config()
    c.mesh.fsdp = 1
    c.model.init, c.model.path, c.sft.steps = "checkpoint", policy, 0
    with pytest.raises(CorruptCheckpointError) as err:
        Trainer(c, workdir)
    message = str(err.value)
    assert "step 2" in message and os.path.join(workdir, "checkpoints", "2") in message
    assert "on_corrupt_checkpoint=previous" in message and "step 1" in message
    assert len(message) < 1000  # one clear line, not a TensorStore trace
    c.train.on_corrupt_checkpoint = "previous"
    t = Trainer(c, workdir)
    try:
        assert t.restored and t.step == 1
        assert [r["step"] for r in train_rows(workdir)] == [1]
        assert os.path.isdir(os.path.join(workdir, "checkpoints", "2.corrupt"))
    finally:
        t.close()


def test_gs_workdir_round_trips_checkpoints_and_metrics(tmp_path):
    """A gs:// workdir against a local GCS emulator: the trainer's file helpers (epath over gcsfs)
    and its orbax checkpoints (tensorstore's gcs driver), saved asynchronously and restored."""
    pytest.importorskip("gcsfs")
    server_mod = pytest.importorskip("gcp_storage_emulator.server")
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from prover_jax.sharding import make_mesh
    from prover_jax.training.checkpoints import Checkpoints
    from prover_jax.training.workdir import append_line, local_copy, read_lines, save_folder, workdir_path

    port = free_port()
    server = server_mod.create_server("127.0.0.1", port, in_memory=True, default_bucket="bucket")
    server.start()
    url = f"http://127.0.0.1:{port}"
    gcs_env = {"STORAGE_EMULATOR_HOST": url, "TENSORSTORE_GCS_HTTP_URL": url,
               "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator", "TENSORSTORE_GCS_HTTP_VERSION": "1"}
    old = {k: os.environ.get(k) for k in gcs_env}
    os.environ.update(gcs_env)
    try:
        root = workdir_path("gs://bucket/run")
        assert str(root) == "gs://bucket/run"
        for step in (1, 2):
            append_line(root / "metrics.jsonl", json.dumps({"step": step}))
        assert [json.loads(x)["step"] for x in read_lines(root / "metrics.jsonl")] == [1, 2]

        def write(folder):
            with open(os.path.join(folder, "tokenizer.json"), "w") as f:
                f.write('{"v": 1}')

        save_folder(write, root / "tokenizer")
        with open(os.path.join(local_copy(root / "tokenizer"), "tokenizer.json")) as f:
            assert json.load(f) == {"v": 1}

        mesh = make_mesh((1, 1, 1), devices=jax.devices()[:1])
        rep = NamedSharding(mesh, P())
        state = {"w": jax.device_put(jnp.arange(6.0).reshape(2, 3), rep), "step": jax.device_put(jnp.int32(2), rep)}
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)

        def round_trip(folder):
            ckpts = Checkpoints(folder, keep=2)
            ckpts.save(1, jax.tree.map(lambda x: x - 1, state), {"step": 1})
            ckpts.save(2, state, {"step": 2})
            ckpts.close()
            return Checkpoints(folder, keep=2).restore(abstract)

        # The emulator sends no x-goog-generation headers, so tensorstore's OCDBT manifest writes
        # occasionally carry a generation it rejects ("Malformed StorageGeneration", about 1 run in 20
        # under load); real GCS always sends them. Only that error is retried, in a fresh folder.
        for attempt in range(3):
            try:
                restored, meta, step = round_trip(root / f"checkpoints{attempt}")
                break
            except ValueError as e:
                if "StorageGeneration" not in str(e) or attempt == 2:
                    raise
        assert step == 2 and meta == {"step": 2}
        np.testing.assert_array_equal(np.asarray(restored["w"]), np.arange(6.0).reshape(2, 3))
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def test_layout_check_names_both_numbers():
    from prover_jax.distributed import check_layout
    check_layout(num_processes=2, num_devices=8, mesh=(1, -1, 1), groups_per_step=4)
    for mesh, axis in (((1, 0, 1), "fsdp=0"), ((-2, 4, 1), "data=-2"), ((0, -1, 1), "data=0")):
        with pytest.raises(ValueError, match=axis):  # named, not a ZeroDivisionError or an IndexError later
            check_layout(num_processes=1, num_devices=8, mesh=mesh, groups_per_step=4)
    with pytest.raises(ValueError, match=r"\(1, 3, 1\).*8 devices of the 2 processes"):
        check_layout(num_processes=2, num_devices=8, mesh=(1, 3, 1), groups_per_step=4)
    with pytest.raises(ValueError, match=r"\(1, 4, 1\).*8 devices"):
        check_layout(num_processes=2, num_devices=8, mesh=(1, 4, 1), groups_per_step=4)
    with pytest.raises(ValueError, match="groups_per_step=3 is not divisible by the 2 processes"):
        check_layout(num_processes=2, num_devices=8, mesh=(1, 8, 1), groups_per_step=3)


def test_coordinator_address_must_be_host_port():
    """Caught before jax starts a coordinator: an empty port or a URL would otherwise wait out the
    initialization timeout and abort with a message about another task dying."""
    from prover_jax.distributed import initialize
    for address in ("127.0.0.1:abc", "127.0.0.1", "127.0.0.1:", "http://127.0.0.1:8476", ":8476", "h:70000"):
        with pytest.raises(ValueError, match="must be HOST:PORT"):
            initialize(address, num_processes=2, process_id=0)

"""The judge served beside training (prover_jax.serving.beside): config checks, the engine mesh over a
host's devices, a LocalJudge the openai judge reaches through the config alone, and a Trainer that
starts it before its judge and stops it on close."""

import httpx
import numpy as np
import pytest

from helpers import serving as SF
from helpers.demo_config import trainer_config
from prover_jax.serving.beside import LocalJudge, check_section, local_mesh
from prover_jax.training.config import default_config


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return SF.make_serving_checkpoint(str(tmp_path_factory.mktemp("judge") / "tiny-judge"))


def judge_config(path):
    j = default_config().judge
    j.name = "openai"
    j.serve.model = path
    j.serve.dtype = "float32"
    j.serve.tensor = 2
    j.serve.max_concurrent_decodes = 2
    j.serve.max_target_length = 8192  # the judge's brief and tools are ~3k byte-level tokens
    j.serve.max_prefill_length = 512
    j.serve.max_string_chars = 24
    j.openai.tool_choice = "required"
    j.openai.max_tool_rounds = 1
    j.max_repairs = 1
    j.openai.preview_chars = 300
    j.openai.cache = False
    j.openai.max_retries = 0
    j.openai.timeout_s = 600  # a loaded 2-core machine decodes the ~3k-token prompt slowly
    return j


def test_config_errors_name_the_field(checkpoint, tmp_path):
    j = judge_config(checkpoint)
    j.name = "contrastive"
    with pytest.raises(ValueError, match="judge.name is 'contrastive'"):
        check_section(j)
    j = judge_config(checkpoint)
    j.openai.base_url = "http://judge-host:8000/v1"
    with pytest.raises(ValueError, match="judge.openai.base_url"):
        check_section(j)
    j = judge_config(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="judge.serve.model: no such folder"):
        check_section(j)
    j = judge_config(checkpoint)
    j.serve.max_target_length = 0
    with pytest.raises(ValueError, match="judge.serve.max_target_length must be >= 1"):
        check_section(j)
    check_section(default_config().judge)  # nothing served: nothing to check


def test_local_mesh_splits_a_hosts_devices():
    import jax

    assert dict(local_mesh(2).shape) == {"data": jax.local_device_count() // 2, "fsdp": 1, "tensor": 2}
    assert dict(local_mesh(0).shape) == {"data": 1, "fsdp": 1, "tensor": jax.local_device_count()}
    with pytest.raises(ValueError, match="judge.serve.tensor"):
        local_mesh(3)


def test_openai_judge_reaches_the_local_judge_through_the_config(checkpoint):
    from prover_jax.judges import JUDGE_ERROR, NO_TOOL_CALL, make_judge

    from helpers.serving import judge_traj

    j = judge_config(checkpoint)
    j.openai.usd_per_m_input = 5.0  # a served judge costs nothing: start() zeroes the prices
    server = LocalJudge.start(j, None)
    try:
        assert j.openai.base_url == server.base_url and server.base_url.startswith("http://127.0.0.1:")
        assert j.openai.model == "tiny-judge" and j.openai.usd_per_m_input == 0.0
        assert httpx.get(f"{server.base_url}/models").status_code == 401  # a key is drawn per run
        key = {"Authorization": f"Bearer {server.api_key}"}
        assert httpx.get(f"{server.base_url}/models", headers=key).json()["data"][0]["id"] == "tiny-judge"
        engine = server.service.worker.driver.engine
        assert dict(engine.mesh.shape)["tensor"] == 2  # the judge's weights split two ways
        judge = make_judge(j.name, j, api_key=server.api_key)  # the config and the key, as the trainer builds it
        success = judge_traj([("go to sinkbasin 1", "You see a mug 1."), ("take mug 1", "You pick up the mug 1."),
                              ("go to cabinet 1", "You arrive."), ("put mug 1 in cabinet 1", "Done.")], True)
        failures = [judge_traj([("go to cabinet 1", "You arrive."), ("close cabinet 1", "It locks.")], False)]
        try:
            p = judge.propose(success, failures, max_segment_turns=2, rng=np.random.default_rng(0))
        finally:
            judge.close()
        assert p.reason not in (JUDGE_ERROR, NO_TOOL_CALL), p  # it answered with a tool call
        assert p.calls >= 1 and p.input_tokens > 0 and p.cost_usd == 0.0, p
    finally:
        server.stop()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{server.base_url}/models", timeout=2)


def test_trainer_serves_its_judge_and_stops_it(checkpoint, tmp_path):
    from prover_jax.training import trainer as trainer_lib

    c = trainer_config()
    c.credit.method = "prover"
    c.judge = judge_config(checkpoint)
    t = trainer_lib.Trainer(c, str(tmp_path / "w"))
    try:
        url = t.run.judge_server.base_url
        assert c.judge.openai.base_url == url and t.run.judge.endpoint.base_url == url
        assert httpx.get(f"{url}/models").status_code == 401
        key = {"Authorization": f"Bearer {t.run.judge_server.api_key}"}
        assert httpx.get(f"{url}/models", headers=key).status_code == 200
        assert t.run.judge.client.api_key == t.run.judge_server.api_key  # the judge's client holds the run's key
    finally:
        t.close()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/models", timeout=2)


def test_a_judge_size_without_its_checkpoint_is_refused():
    j = default_config().judge
    j.name, j.serve.size = "openai", "9B"
    with pytest.raises(ValueError, match=r"judge.serve.model is empty.*JUDGE_PATH"):
        check_section(j)

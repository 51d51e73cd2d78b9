"""The judge served beside training: `prover-serve`'s engine in the training process, on this host's
devices, and the `openai` judge pointed at it.

    server = LocalJudge.start(config.judge, workdir)   # when config.judge.serve.model is set
    config.judge.openai.base_url == server.base_url      # http://127.0.0.1:PORT/v1, set by start()
    ...
    server.stop()

Placement: every training process serves the judge calls of its own groups on its own local devices
(`judge.serve.tensor`-way tensor parallel, the rest data parallel over engine slots), so judge traffic
never leaves the host and a pod needs no extra machine. The judge's weights (compute dtype) and its
decode cache stay resident next to the policy's train state and rollout engine: `prover-aot` counts
them (its `judge_generate` program and the `together` row). A judge too large for that, or shared by
several runs, is served on its own host instead (`prover-serve` there, judge.openai.base_url here).

Served locally, the judge's tokens cost nothing (judge.openai.usd_per_m_* are set to 0). The server wants
a random key drawn per run, which the trainer hands to the judge's client; no environment key is read.
"""

from __future__ import annotations

import logging
import os
import secrets

log = logging.getLogger(__name__)


def local_mesh(tensor: int, devices=None):
    """This host's devices as an engine mesh (data, fsdp=1, tensor); tensor 0 = all of them."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    from prover_jax.sharding import MESH_AXES

    devices = list(jax.local_devices() if devices is None else devices)
    t = len(devices) if tensor in (0, None) else int(tensor)
    if t < 1 or len(devices) % t:
        raise ValueError(f"tensor-parallel degree {tensor} (judge.serve.tensor / --tensor) does not divide "
                         f"this host's {len(devices)} devices")
    return Mesh(np.array(devices, dtype=object).reshape(len(devices) // t, 1, t), MESH_AXES)


def check_section(judge_section) -> None:
    """ValueError naming the field when judge.serve is set up wrong."""
    s = judge_section.serve
    if not s.model and not s.size:
        return
    if not s.model:
        raise ValueError(f"judge.serve.size is {s.size!r} but judge.serve.model is empty: give the judge's "
                         f"checkpoint folder (configs/qwen3_5.py reads it from $JUDGE_PATH)")
    if judge_section.name != "openai":
        raise ValueError(f"judge.serve.model is set but judge.name is {judge_section.name!r}: the served judge "
                         f"is called through the openai judge (set judge.name=openai)")
    if judge_section.openai.base_url:
        raise ValueError(f"judge.serve.model and judge.openai.base_url ({judge_section.openai.base_url}) are "
                         f"both set: serve the judge here or call one elsewhere, not both")
    if not os.path.isdir(s.model):
        raise ValueError(f"judge.serve.model: no such folder {s.model}")
    for name in ("max_concurrent_decodes", "max_target_length", "max_prefill_length"):
        if int(s[name]) < 1:
            raise ValueError(f"judge.serve.{name} must be >= 1, got {s[name]}")


class LocalJudge:
    """A running prover-serve (engine worker + HTTP server thread) inside this process."""

    def __init__(self, service, server, name: str, api_key: str):
        self.service, self.server, self.name, self.api_key = service, server, name, api_key

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @classmethod
    def start(cls, judge_section, workdir: str | None = None) -> "LocalJudge":
        """Loads judge.serve.model on this host's devices, serves it on judge.serve.host:port (0: a free
        port) behind a random API key (`.api_key`, for the judge's client) and points judge.openai at it
        (base_url, model, zero prices). Mutates `judge_section`."""
        from prover_jax.serving.app import create_app
        from prover_jax.serving.service import ServerThread, build_service

        check_section(judge_section)
        s = judge_section.serve
        name = os.path.basename(os.path.normpath(s.model))
        service = build_service(s.model, served_model_name=name, max_concurrent_decodes=s.max_concurrent_decodes,
                                max_target_length=s.max_target_length, max_prefill_length=s.max_prefill_length,
                                max_pending=max(int(judge_section.max_concurrency) * 2, 4), dtype=s.dtype,
                                max_string_chars=s.max_string_chars, mesh=local_mesh(s.tensor))
        api_key = secrets.token_urlsafe(32)  # a key per run: nobody else on the network can call it
        try:
            server = ServerThread(create_app(service, api_key=api_key), host=s.host, port=int(s.port)).start()
        except Exception:
            service.worker.stop()
            raise
        o = judge_section.openai
        o.base_url, o.model, o.usd_per_m_input, o.usd_per_m_output = server.base_url, name, 0.0, 0.0
        log.info("judge %s served at %s (%s)", name, server.base_url, s.model)
        return cls(service, server, name, api_key)

    def stop(self) -> None:
        self.server.stop()
        self.service.worker.stop()


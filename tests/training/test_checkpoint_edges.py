"""Checkpoints and run files at the edges of a resume: a checkpoint of another config is reported as
such (never as corrupt, never set aside), set-asides keep each other, a lost KL reference is an error;
a torn last metrics line is dropped, files are replaced whole."""

import glob
import json
import logging
import os

import jax.numpy as jnp
import pytest
from etils import epath

from prover_jax.training.checkpoints import (CheckpointMismatchError, Checkpoints, CorruptCheckpointError,
                                             restore_reference)
from prover_jax.training.wiring import abstract
from prover_jax.training.workdir import read_rows, write_atomic

STATE = {"w": jnp.ones((4,)), "step": jnp.array(4)}


def saved(directory, step=4, state=STATE):
    ck = Checkpoints(epath.Path(directory), keep=2)
    ck.save(step, state, {"step": step})
    ck.wait()
    return ck


def spoil(folder):
    """Overwrites a checkpoint's array data (its metadata stays readable)."""
    for f in glob.glob(os.path.join(folder, "**", "d", "*"), recursive=True):
        with open(f, "wb") as out:
            out.write(b"garbage")


@pytest.mark.parametrize("other, differs", [({"w": jnp.ones((8,)), "step": jnp.array(0)}, "w (4,) stored, (8,) now"),
                                            ({**STATE, "mu": jnp.ones((4,))}, "lacks: mu")])
@pytest.mark.parametrize("on_corrupt", ["error", "previous"])
def test_a_checkpoint_of_another_config_is_no_corrupt_one(tmp_path, other, differs, on_corrupt):
    saved(tmp_path / "c").close()
    ck = Checkpoints(epath.Path(tmp_path / "c"), keep=2)  # a new process: nothing saved through it
    try:
        with pytest.raises(CheckpointMismatchError) as e:
            ck.restore(abstract(other), on_corrupt=on_corrupt)
        msg = str(e.value)
        assert "does not match this config" in msg and str(tmp_path / "c" / "4") in msg and differs in msg
        assert "remove" not in msg and "corrupt" not in msg
        assert sorted(os.listdir(tmp_path / "c")) == ["4"]  # left as it was
        assert ck.restore(abstract(STATE))[2] == 4
    finally:
        ck.close()


def test_set_asides_keep_each_other(tmp_path):
    ck = saved(tmp_path / "c", step=2)
    try:
        for _ in range(2):
            ck.save(6, STATE, {"step": 6})
            ck.wait()
            spoil(str(tmp_path / "c" / "6"))
            with pytest.raises(CorruptCheckpointError, match="on_corrupt_checkpoint=previous to resume from step 2"):
                ck.restore(abstract(STATE))
            assert ck.restore(abstract(STATE), on_corrupt="previous")[2] == 2
        assert sorted(os.listdir(tmp_path / "c")) == ["2", "6.corrupt", "6.corrupt.1"]
        assert ck.manager.all_steps() == [2]
    finally:
        ck.close()


def test_a_lost_kl_reference_is_an_error_past_step_0(tmp_path):
    ref = Checkpoints(epath.Path(tmp_path / "reference"), keep=1)
    try:
        assert restore_reference(ref, abstract(STATE), step=0) is None  # the first RL step takes it
        with pytest.raises(FileNotFoundError, match=f"no KL reference checkpoint in {tmp_path / 'reference'}"):
            restore_reference(ref, abstract(STATE), step=3)
        ref.save(0, STATE, {"step": 0})
        ref.wait()
        assert float(restore_reference(ref, abstract(STATE), step=3)["w"][0]) == 1.0
        spoil(str(tmp_path / "reference" / "0"))
        for step, advice in ((3, "cannot be recovered"), (0, "its first RL step takes the reference again")):
            with pytest.raises(CorruptCheckpointError) as e:
                restore_reference(ref, abstract(STATE), step=step)
            assert advice in str(e.value) and "start afresh" not in str(e.value).replace("start afresh in", "")
    finally:
        ref.close()


def test_a_torn_last_metrics_line_is_dropped(tmp_path, caplog):
    path = epath.Path(tmp_path / "metrics.jsonl")
    write_atomic(path, '{"step": 1}\n{"step": 2}\n{"step": 3, "tasks": [1')
    assert os.listdir(tmp_path) == ["metrics.jsonl"]  # no temporary file left beside it
    with caplog.at_level(logging.WARNING):
        assert read_rows(path) == [{"step": 1}, {"step": 2}]
    assert any(str(path) in r.getMessage() and "torn" in r.getMessage() for r in caplog.records)
    write_atomic(path, '{"step": 1}\n{"step": 2\n{"step": 3}\n')
    with pytest.raises(ValueError, match=f"{path}, line 2"):
        read_rows(path)
    assert read_rows(epath.Path(tmp_path / "absent.jsonl")) == []
    assert json.loads(path.read_text().splitlines()[0]) == {"step": 1}

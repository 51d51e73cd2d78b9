"""What a run shows and writes besides checkpoints: third-party logging off by default, the progress
bar's figures and the end summary, progress.png's curves, the TensorBoard mirror of metrics.jsonl."""

import glob
import json
import logging
import os
import socket
import struct

import pytest
from absl import logging as absl_logging

from prover_jax.training import logs
from prover_jax.training.metrics import TensorBoardLog
from prover_jax.training.plot import figure, plot_metrics, series
from prover_jax.training.run import _live, summary_block
from prover_jax.training.workdir import workdir_path

ORBAX_FILE = "/venv/lib/python3.11/site-packages/orbax/checkpoint/_src/path/atomicity.py"
OWN_FILE = os.path.join(os.path.dirname(logs.__file__), "trainer.py")


@pytest.fixture
def logger_state():
    names = ("absl",) + logs.THIRD_PARTY
    levels = {n: logging.getLogger(n).level for n in names}
    filters = list(logging.getLogger("absl").filters)
    yield
    for n, level in levels.items():
        logging.getLogger(n).setLevel(level)
    logging.getLogger("absl").filters[:] = filters


def _passes_absl(level: int, pathname: str) -> bool:
    """Whether the `absl` logger lets a record of this level from this file through its filters."""
    return bool(logging.getLogger("absl").filter(logging.LogRecord("absl", level, pathname, 1, "m", None, None)))


def test_third_party_logging_off_by_default_on_with_the_flag(logger_state):
    logs.quiet_third_party(False)
    for name in ("orbax", "orbax.checkpoint._src.path", "jax._src.xla_bridge", "grain", "urllib3", "httpx"):
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING, name
    assert not _passes_absl(logging.INFO, ORBAX_FILE)  # orbax logs through absl's logger
    assert _passes_absl(logging.WARNING, ORBAX_FILE)
    assert _passes_absl(logging.INFO, OWN_FILE)  # the project's own lines stay
    seen = []
    handler = logging.Handler()
    handler.emit = seen.append
    logging.getLogger("absl").addHandler(handler)
    try:
        absl_logging.info("an info line from outside prover_jax")
        absl_logging.warning("a warning from outside prover_jax")
    finally:
        logging.getLogger("absl").removeHandler(handler)
    assert [r.getMessage() for r in seen] == ["a warning from outside prover_jax"]

    logs.quiet_third_party(True)
    logs.quiet_third_party(True)  # idempotent
    for name in ("orbax", "jax", "grain", "urllib3"):
        assert logging.getLogger(name).getEffectiveLevel() == logging.INFO, name
    assert _passes_absl(logging.INFO, ORBAX_FILE)
    assert logs._FILTER not in logging.getLogger("absl").filters


def prover_rows() -> list[dict]:
    rows = [{"step": 0, "eval/success": 0.25, "eval/success_se": 0.05, "eval/episodes": 200}]
    for step in (1, 2, 3, 4):
        rows.append({"step": step, "applied": True, "tasks": [7, 8], "success_rate": 0.1 * step,
                     "loss": 0.5 / step, "prover/valid_proposals": step % 2 * 2.0,
                     "prover/accepted": step % 2 * 1.0, "prover/acceptance_rate": step % 2 * 0.5,
                     "time/rollout_s": 2.0, "time/credit_wait_s": 0.5, "time/update_s": 1.0,
                     "time/judge_s": 0.25, "time/verify_s": 0.75, "time/step_s": 4.0})
        if step % 2 == 0:
            rows.append({"step": step, "eval/success": 0.25 + 0.1 * step, "eval/success_se": 0.04,
                         "eval/episodes": 200})
    return rows


def test_plot_has_eval_with_standard_errors_acceptance_and_time_split(tmp_path):
    rows = prover_rows()
    s = series(rows)
    assert s["eval success"] == ([0, 2, 4], [0.25, 0.45, 0.65], [0.05, 0.04, 0.04])
    assert s["train success"][0] == [1, 2, 3, 4]
    assert s["acceptance"] == ([1, 3], [0.5, 0.5])  # no point at the steps without proposals
    assert s["time/rollout"][1] == [2.0] * 4 and s["time/other"][1] == [0.5] * 4  # 4 - (2 + 0.5 + 1)
    fig = figure(rows)
    top, bottom = fig.axes
    bars = [c for c in top.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(bars) == 1
    assert bars[0].lines[0].get_xydata().tolist() == [[0, 0.25], [2, 0.45], [4, 0.65]]
    assert any("eval success" in t.get_text() for t in top.get_legend().get_texts())
    assert len(bottom.collections) == 4  # stacked: rollout, credit wait, update, other
    assert {line.get_label() for line in bottom.lines} == {"judge (during rollout)", "verify (during rollout)"}
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert os.path.getsize(plot_metrics(str(path), str(tmp_path / "p.png"))) > 0


@pytest.mark.parametrize("keep", ["grpo", "no_eval", "eval_only", "empty"])
def test_plot_with_keys_missing(tmp_path, keep):
    rows = [{"step": s, "success_rate": 0.5, "time/step_s": 1.0, "time/update_s": 0.5} for s in (1, 2)]
    rows = {"grpo": [{"step": 0, "eval/success": 0.5, "eval/success_se": 0.1}] + rows, "no_eval": rows,
            "eval_only": [{"step": 0, "eval/success": 0.5}], "empty": []}[keep]
    s = series(rows)
    assert "acceptance" not in s and "time/rollout" not in s
    assert ("eval success" in s) == (keep in ("grpo", "eval_only"))
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert os.path.getsize(plot_metrics(str(path), str(tmp_path / "p.png"))) > 0
    assert len(figure(rows).axes) == (2 if "time/other" in s else 1)


def test_plot_of_a_single_step_shows_it():
    """One training row (a 1-step run): its success is a visible point and its wall time stacked bars
    that add up to time/step_s (a line or an area over one x draws nothing)."""
    fig = figure([{"step": 1, "success_rate": 0.5, "time/step_s": 4.0, "time/rollout_s": 2.0, "time/update_s": 1.0}])
    top, bottom = fig.axes
    (line,) = top.lines
    assert line.get_xydata().tolist() == [[1, 0.5]] and line.get_marker() not in ("None", "", " ", None)
    bars = bottom.patches
    assert [b.get_height() for b in bars] == [2.0, 1.0, 1.0] and [b.get_y() for b in bars] == [0.0, 2.0, 3.0]


def read_events(folder) -> tuple[int, dict[str, list[tuple[int, float]]]]:
    """(event files, tag -> [(step, value)]) of a TensorBoard folder, read record by record."""
    from tensorboardX.proto.event_pb2 import Event

    files = sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*")))
    out = {}
    for path in files:
        data = open(path, "rb").read()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            event = Event.FromString(data[i + 12:i + 12 + n])
            i += 12 + n + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return len(files), out


def test_tensorboard_scalars_at_their_steps_and_resume(tmp_path):
    folder = tmp_path / "run" / "tensorboard"
    rows = [{"step": 0, "eval/success": 0.25, "eval/success_se": 0.05, "eval/episodes": 2},
            {"step": 1, "success_rate": 0.5, "loss": 1.5, "applied": True, "tasks": [3, 4], "note": "x"},
            {"step": 2, "success_rate": 0.75, "loss": 1.25, "compiles": 3}]
    tb = TensorBoardLog(workdir_path(str(folder)))
    for r in rows:
        tb.write(r)
    n, got = read_events(str(folder))  # readable while the writer is open: flushed after every row
    assert n == 1
    assert got == {"eval/success": [(0, 0.25)], "eval/success_se": [(0, pytest.approx(0.05))],
                   "eval/episodes": [(0, 2.0)], "success_rate": [(1, 0.5), (2, 0.75)],
                   "loss": [(1, 1.5), (2, 1.25)], "compiles": [(2, 3.0)]}  # not bools, lists, strings
    tb.close()
    (first,) = glob.glob(os.path.join(folder, "events.out.tfevents.*"))
    os.rename(first, os.path.join(folder, "events.out.tfevents.1000000000.earlier"))  # an earlier start's

    # resumed from the checkpoint of step 1: the trainer kept rows 0-1 of metrics.jsonl; step 2 again
    tb = TensorBoardLog(workdir_path(str(folder)), rows[:2])
    tb.write({"step": 2, "success_rate": 0.0, "loss": 1.0})
    tb.close()
    n, got = read_events(str(folder))
    assert n == 1
    assert got["success_rate"] == [(1, 0.5), (2, 0.0)] and got["loss"] == [(1, 1.5), (2, 1.0)]
    assert "compiles" not in got and got["eval/success"] == [(0, 0.25)]


def test_tensorboard_on_a_gs_workdir(tmp_path):
    """A gs:// run folder (local GCS emulator): the event file is copied there after every row, and a
    resume replaces it."""
    pytest.importorskip("gcsfs")
    server_mod = pytest.importorskip("gcp_storage_emulator.server")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = server_mod.create_server("127.0.0.1", port, in_memory=True, default_bucket="bucket")
    server.start()
    env = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        folder = workdir_path("gs://bucket/run/tensorboard")

        def downloaded(name: str) -> dict:
            local = tmp_path / name
            local.mkdir()
            for p in folder.glob("events.out.tfevents.*"):
                (local / p.name).write_bytes(p.read_bytes())
            return read_events(str(local))

        rows = [{"step": 1, "success_rate": 0.5}, {"step": 2, "success_rate": 0.25}]
        tb = TensorBoardLog(folder)
        for r in rows:
            tb.write(r)
        assert downloaded("a") == (1, {"success_rate": [(1, 0.5), (2, 0.25)]})
        tb.close()
        tb = TensorBoardLog(folder, rows[:1])
        tb.write({"step": 2, "success_rate": 1.0})
        tb.close()
        assert downloaded("b") == (1, {"success_rate": [(1, 0.5), (2, 1.0)]})
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        server.stop()


def test_progress_figures_and_summary_block():
    row = {"success_rate": 0.375, "prover/acceptance_rate": 0.5, "prover/accepted": 1.0,
           "prover/valid_proposals": 2.0, "time/step_s": 12.34}
    assert _live(row, {"eval/success": 0.655, "eval/success_se": 0.0312}) == {
        "train": "0.38", "eval": "0.66±0.03", "accept": "0.50 (1/2)", "s/step": "12.3"}
    assert _live({"success_rate": 1.0}, None) == {"train": "1.00"}  # grpo, no evaluation yet
    assert _live(None, {"eval/success": 0.5}) == {"eval": "0.50±0.00"}
    text = summary_block({"eval_before_rl": {"eval/success": 0.2, "eval/success_se": 0.05, "eval/episodes": 200},
                          "eval_after_rl": {"eval/success": 0.4, "eval/success_se": 0.06, "eval/episodes": 200},
                          "rl_steps": 8, "valid_proposals": 4.0, "acceptance_rate": 0.75,
                          "time_s": {"rollout": 30.0, "credit_wait": 2.0, "update": 10.0}, "wall_s_this_run": 60})
    assert "40.0% ± 6.0% after RL, 20.0% ± 5.0% before" in text
    assert "RL steps        8" in text and "75% of 4 valid proposals" in text
    assert "rollout 30, credit wait 2, update 10" in text and "whole run 60" in text
    assert "acceptance" not in summary_block({"eval_after_rl": {"eval/success": 0.4}, "valid_proposals": 0.0})

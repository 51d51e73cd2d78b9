"""prover-aot --fill: a packing_fill record rebuilt as steps for a config, the bucket list's padding
waste and fill over them (hand-made lengths, no compile)."""

import json

import ml_collections
import pytest

from prover_jax.aot.fill import buckets_row, packed_figures, read_steps, step_lengths, train_row_figures


def _config(max_tokens_per_row=100, packed_buckets=()):
    return ml_collections.ConfigDict({
        "rollout": {"groups_per_step": 2, "group_size": 4, "max_target_length": 100},
        "train": {"micro_batch_size": 2, "max_tokens_per_row": max_tokens_per_row, "packed_buckets": packed_buckets}})


def test_a_record_line_is_one_step_of_the_config(tmp_path):
    assert step_lengths([10, 20], [90, 95], 1, 2, 3) == [10, 90, 90, 20, 95, 95]
    assert step_lengths([10], [300], 0, 1, 2, cap=100) == [100, 100]
    path = tmp_path / "fill.jsonl"
    path.write_text(json.dumps({"success_share": 0.5, "expert_lengths": [30], "wanderer_lengths": [150]}) + "\n\n")
    assert read_steps(str(path), _config()) == [[30, 30, 100, 100] * 2]  # 2 of 4 win; cut at 100
    path.write_text("")
    with pytest.raises(ValueError, match="no batches"):
        read_steps(str(path), _config())


def test_padding_waste_and_fill_of_a_bucket_list():
    # 8 episodes, rows of 100, micro-batches of 2 rows: 8 full rows -> 4; 4 full + 4 of 30 -> 5 rows -> 3;
    # 8 of 30 -> 3 rows -> 2
    steps = [[100] * 8, [100] * 4 + [30] * 4, [30] * 8]
    f = packed_figures(steps, [2, 4], 100, 2)
    assert f["micro_batches"] == [4, 3, 2] and f["bucketed"] == [4, 4, 2]
    assert f["padding_waste"] == pytest.approx(1 - 9 / 10)
    assert f["fill"] == pytest.approx((800 + 520 + 240) / (10 * 200))
    assert f["per_bucket"][4] == {"step_share": pytest.approx(2 / 3, abs=1e-4), "fill": pytest.approx(1320 / 1600)}
    assert f["per_bucket"][2]["fill"] == pytest.approx(240 / 400)
    # a bucket no step lands in: the steps' fill before bucketing (a step that fills it exactly)
    f = packed_figures(steps, [1, 2, 3, 4], 100, 2)
    assert f["padding_waste"] == 0 and f["per_bucket"][1] == {"step_share": 0.0, "fill": pytest.approx(1560 / 1800)}


def test_seconds_per_1k_real_tokens_packed_and_unpacked():
    steps = [[100] * 8, [30] * 8]  # 4 and 2 micro-batches packed
    rows = [{"fn": "train_step", "topology": "v6e-8", "bucket": b, "estimated_s": s, "compile_s": 10.0 * b}
            for b, s in ((2, 1.0), (4, 3.0))]
    c = _config()
    for r in rows:
        r.update(train_row_figures(c, r, steps))
    assert rows[1]["real_tokens_per_step"] == 800 and rows[1]["s_per_1k_real_tokens"] == pytest.approx(3.0 / 0.8)
    assert rows[0]["fill"] == pytest.approx(240 / 400) and rows[0]["step_share"] == 0.5
    row = buckets_row(c, rows, steps, "fill.jsonl")
    assert (row["fn"], row["buckets"], row["compile_s"], row["compile_s_total"]) == ("train_buckets", [2, 4],
                                                                                   [20.0, 40.0], 60.0)
    assert row["estimated_s_per_step"] == 2.0 and row["s_per_1k_real_tokens"] == pytest.approx(2.0 / 0.52, rel=1e-3)
    assert buckets_row(c, rows, None)["buckets"] == [2, 4] and "padding_waste" not in buckets_row(c, rows, None)
    # one episode per row: every step runs the [8, 100] batch
    c = _config(max_tokens_per_row=0)
    unpacked = {"fn": "train_step", "estimated_s": 4.0}
    assert train_row_figures(c, unpacked, steps) == {"fill": 0.65, "real_tokens_per_step": 520.0,
                                                     "s_per_1k_real_tokens": pytest.approx(4.0 / 0.52, rel=1e-3)}
    assert buckets_row(c, [unpacked], steps) is None

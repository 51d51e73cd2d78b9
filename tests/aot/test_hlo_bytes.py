"""The roofline's byte count on hand-written HLO: an asynchronous copy between HBM and VMEM moves its
array once, an HBM-to-HBM copy reads and writes it, a while body counts per trip, and the bytes by
jax op (prover-aot --bytes_by_op) carry the same trip counts."""

from prover_jax.aot.hlo_bytes import bytes_accessed

ARRAY = 1024 * 128 * 4  # f32[1024,128], already a whole number of (8, 128) tiles


def module(body: str) -> str:
    return "HloModule m\n\nENTRY %main (p: f32[1024,128]) -> f32[1024,128] {\n" + body + "\n}\n"


def test_a_prefetch_into_vmem_reads_hbm_once():
    text = module(
        "  %p = f32[1024,128]{1,0:T(8,128)} parameter(0)\n"
        "  %cs = (f32[1024,128]{1,0:T(8,128)S(1)}, f32[1024,128]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%p)\n"
        "  ROOT %cd = f32[1024,128]{1,0:T(8,128)S(1)} copy-done(%cs)")
    assert bytes_accessed(text)["bytes"] == ARRAY


def test_an_hbm_copy_reads_and_writes():
    text = module(
        "  %p = f32[1024,128]{1,0:T(8,128)} parameter(0)\n"
        "  %cs = (f32[1024,128]{1,0:T(8,128)}, f32[1024,128]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%p)\n"
        "  %cd = f32[1024,128]{1,0:T(8,128)} copy-done(%cs)\n"
        "  ROOT %n = f32[1024,128]{1,0:T(8,128)} negate(%cd)")
    assert bytes_accessed(text)["bytes"] == 2 * ARRAY + 2 * ARRAY  # the copy, then the negate's read + write


def _loop(body_meta: str = "") -> str:
    """Five trips of a negate (carrying `body_meta` as its attribute text), then an exp of the result."""
    return ("HloModule m\n\n"
            "%cond (s: (s32[], f32[1024,128])) -> pred[] {\n"
            "  %s = (s32[], f32[1024,128]{1,0:T(8,128)}) parameter(0)\n"
            "  %i = s32[] get-tuple-element(%s), index=0\n"
            "  %n = s32[] constant(5)\n"
            "  ROOT %lt = pred[] compare(%i, %n), direction=LT\n"
            "}\n\n"
            "%body (s: (s32[], f32[1024,128])) -> (s32[], f32[1024,128]) {\n"
            "  %s = (s32[], f32[1024,128]{1,0:T(8,128)}) parameter(0)\n"
            "  %i = s32[] get-tuple-element(%s), index=0\n"
            "  %x = f32[1024,128]{1,0:T(8,128)} get-tuple-element(%s), index=1\n"
            "  %y = f32[1024,128]{1,0:T(8,128)} negate(%x)" + body_meta + "\n"
            "  ROOT %t = (s32[], f32[1024,128]{1,0:T(8,128)}) tuple(%i, %y)\n"
            "}\n\n"
            "ENTRY %main (p: f32[1024,128]) -> (s32[], f32[1024,128]) {\n"
            "  %p = f32[1024,128]{1,0:T(8,128)} parameter(0)\n"
            "  %z = s32[] constant(0)\n"
            "  %t = (s32[], f32[1024,128]{1,0:T(8,128)}) tuple(%z, %p)\n"
            "  %w = (s32[], f32[1024,128]{1,0:T(8,128)}) while(%t), condition=%cond, body=%body\n"
            "  %r = f32[1024,128]{1,0:T(8,128)} get-tuple-element(%w), index=1\n"
            "  ROOT %e = f32[1024,128]{1,0:T(8,128)} exponential(%r)\n"
            "}\n")


def test_a_while_body_counts_per_trip():
    out = bytes_accessed(_loop())
    assert out["loops"] == 1 and out["unknown_trip_counts"] == 0
    assert 0 <= out["bytes"] - 6 * 2 * ARRAY < 100  # five negates and the exp (the condition: bytes a trip)


def test_bytes_by_jax_op_carry_the_trip_counts():
    meta = ', metadata={op_name="jit(step)/jit(main)/while/body/layer/neg[dims=(0,)]"}'
    out = bytes_accessed(_loop(meta), by_op=5)
    by = dict(out["by_op"])
    assert (by.pop("body/layer/neg"), by.pop("(exponential)")) == (5 * 2 * ARRAY, 2 * ARRAY)
    assert set(by) == {"(compare)"} and by["(compare)"] < 100  # the loop condition, per trip
    assert out["by_op"][0][0] == "body/layer/neg" and sum(v for _, v in out["by_op"]) == out["bytes"]
    assert "by_op" not in bytes_accessed(_loop(meta)) and bytes_accessed(_loop(meta))["bytes"] == out["bytes"]

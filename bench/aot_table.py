"""Markdown tables of prover-aot JSON lines (bench/aot_layouts.sh's output).

    python bench/aot_table.py bench/aot_layouts.jsonl
"""

import json
import sys


def _si(x, unit=""):
    if x is None:
        return "-"
    for p, s in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= p:
            return f"{x / p:.2f} {s}{unit}"
    return f"{x:.3g} {unit}"


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    print("| run | fn | mesh | GiB/chip (of HBM) | headroom | flops/chip (vs model flops) | HBM bytes/chip | "
          "collective bytes/chip | est. time (bound) | est. MFU | tokens/s/chip | compile |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["fn"] in ("train_buckets", "together"):  # summaries of the rows before them
            continue
        if "bucket" in r:  # packed rows: one train step per micro-batch bucket
            r = dict(r, fn=f"{r['fn']} ({r['bucket']} micro-batches)")
        if "error" in r:
            print(f"| {r['run']} | {r['fn']} | | does not fit: {r.get('what_exceeds', r['error'][:60])} "
                  f"{r.get('required_gib', '')} GiB (of {r.get('hbm_gib', '')}) | | | | | | | | {r['compile_s']:.0f} s |")
            continue
        m = r["mesh"]
        ratio = r["flops_per_device"] / r["model_flops_per_device"] if r["model_flops_per_device"] else 0
        t = r["estimated_s"]
        t_txt = f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"
        if r["fn"] == "generate":
            t_txt += f", {r['vs_floor']}x HBM floor"
        print(f"| {r['run']} | {r['fn']} | {m['data']}x{m['fsdp']}x{m['tensor']} | {r['per_device_gib']:.1f} "
              f"({r['hbm_gib']:.0f}) | {100 * r['headroom']:.0f}% | {_si(r['flops_per_device'])} ({ratio:.2f}x) | "
              f"{_si(r['bytes_accessed_per_device'], 'B')} | {_si(r.get('collective_bytes_per_device'), 'B')} | {t_txt} ({r['bound']}) | "
              f"{100 * r['estimated_mfu']:.1f}% | {r['tokens_per_s_per_chip']:,.0f} | {r['compile_s']:.0f} s |")


if __name__ == "__main__":
    main(sys.argv[1])

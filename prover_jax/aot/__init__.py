"""Ahead-of-time compilation for TPU slices on any host: `prover-aot` (cli), the chip table (chips),
the programs a run compiles (programs) and a loop-aware flop count (flops)."""

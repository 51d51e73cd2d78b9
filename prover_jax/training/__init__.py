"""Training: the GRPO loss (with per-token advantages) and the jitted train step."""

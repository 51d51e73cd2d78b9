"""What every model family builds from, family-neutral: parameter helpers, `Linear`, the SwiGLU MLP and
RoPE (`layers`); the attention kernels (`flash`) and the KV-cache attention around them (`attention`);
the decoder scaffolding: embedding, layer loops, logits and the engine's cache contract (`model`); HF
checkpoint folders: weight-file discovery, streamed sharded loading, sharded safetensors export
(`weights`). A family's folder holds only what is its own: its config, its mixers, its key table."""

"""Model families. Each folder holds config, pure modules, and its HF key-mapping table."""

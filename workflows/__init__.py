"""Temporal workflows of ate: deterministic orchestration only, no I/O."""

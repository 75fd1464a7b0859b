"""``ate dev``: run PostgreSQL, Temporal and every ate process on one machine."""

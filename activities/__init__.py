"""Temporal activities: every side effect of an ate operation (Postgres, atelet)."""

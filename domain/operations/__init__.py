"""Inputs and results of the workflows and their activities, one module per workflow
(`resume`, `suspend`, `pause`, `upload`, `golden`, `revert`, `drain`, `snapshot_gc`), plus the
atelet calls they share (`atelet_calls`) and the inputs several steps take (`common`).

Each workflow, activity and step takes one dataclass and returns one, so fields can be added
later without breaking callers (Temporal's samples do the same).
"""

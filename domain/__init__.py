"""The domain of ate, shared by every process: states and the actor state table, references,
workflow and activity inputs and results (`domain.operations`), the typed actor template and
worker pool specs, resource quantities, label selectors and failpoints.

Standard library only (no pydantic, no temporalio, no I/O beyond the failpoints' files), so that
workflow code, which runs in Temporal's deterministic sandbox, can import all of it.
"""

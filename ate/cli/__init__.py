"""The ``ate`` command-line interface: kubectl-like verbs and nouns over the REST API."""

"""`ate worker`: the Temporal worker process for task queue `ate-control`. It only wires: settings,
the store, the atelet channels, the workflows of `workflows` and the activities of `activities`."""

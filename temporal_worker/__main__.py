"""`python -m temporal_worker` runs the Temporal worker (same as `ate worker`)."""

from temporal_worker.main import main

main()

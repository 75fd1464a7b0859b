"""`python -m workflows` runs the Temporal worker (same as `ate worker`)."""

from workflows.worker import main

main()

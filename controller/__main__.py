"""`python -m controller` runs ate-controller (same as `ate controller`)."""

from controller.main import main

main()

"""`python -m api` runs the API server (same as `ate api-server`)."""

from api.main import main

main()

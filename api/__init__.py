"""`ate-api-server`: the REST API (FastAPI) under /v1; starts and queries workflows."""

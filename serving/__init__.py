"""What the api-server and the router share about serving HTTP with uvicorn (`serving.protocol`)."""

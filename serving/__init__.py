"""Ray Serve apps: the OpenAI-compatible agent endpoint and the /play page (see serving/app.py)."""

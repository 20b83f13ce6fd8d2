"""The FastAPI service example (a package only so that type checkers tell its app.py from others)."""

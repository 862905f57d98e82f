"""The operator console: its page, its routes and models, its static files."""

"""Integrations with web frameworks: Django (`deferq.contrib.django`), FastAPI and
Starlette (`deferq.contrib.starlette`), Flask (`deferq.contrib.flask`).

Each module imports its framework, so import only the one you use."""

"""One attempt of a job: the runner and its progress writer, used by the worker and eager mode."""

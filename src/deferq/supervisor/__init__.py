"""The supervisor (`deferq run`): a master process that keeps pools of worker processes."""

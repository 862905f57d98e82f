"""Features between jobs: workflows (chains, groups, chords) and batches."""

"""Features between jobs: workflows (chains, groups, chords), batches, periodic schedules."""

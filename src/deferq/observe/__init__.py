"""What deferq tells about itself: per-minute history counts and log formats."""

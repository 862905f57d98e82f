"""Topics and callback delivery: definitions, the retry condition, signing, delivery."""

"""Worlds an agent acts in: the procedural ground truth and Cosmos 3 imagining it."""

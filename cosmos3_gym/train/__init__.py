"""The trainer's side: the GRPO update and the world-model trainer (with the examples' helpers)."""

"""The denoising MDP without Gym: tasks, streams, the sampler (SDE step and sigma grids), the
guided step, the engine (prepare / commit), trajectories and their replay.

Imports :mod:`cosmos3_gym.model` and nothing above it (no gymnasium). The procedural world's
numpy core (:mod:`.procedural_world`) lives here because the rollout env's default conditioning
and the rewards read it.
"""

"""Cosmos 3 as a batched function: torch and diffusers, no gymnasium.

Checkpoint vetting, conditions (image / video / action-clip encodes, cached by content), the
model (tokenize, forward packed rows, decode, ``update_weights``, ``weights_version``), row
packing and its attention processor, the tiny embedded model, and the small helpers the model
needs (deferred interrupts, thread guards). Every private diffusers symbol the package uses is
imported in :mod:`.diffusers_private` and nowhere else.
"""

"""One model, two threads: every call that touches the model's modules or caches (a VAE decode,
a condition encode, a forward) holds it, so a second thread gets the clear error instead of
frames computed through another call's VAE cache."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch


@pytest.fixture
def model():
    from cosmos3_gym.model.model import Cosmos3Model

    return Cosmos3Model.embedded(device="cpu")


def hold_inside_decode(model):
    """Start a thread whose ``model.decode`` stops inside the VAE until released; returns
    (started event, release event, results list, thread)."""
    inside, release, results = threading.Event(), threading.Event(), []
    decode = model.vae.decode

    def slow_decode(*args, **kwargs):
        if threading.current_thread().name == "holder":
            inside.set()
            release.wait(30)
        return decode(*args, **kwargs)

    model.vae.decode = slow_decode
    latents = torch.randn(1, *model.latent_shape(9, 32, 32), generator=torch.Generator().manual_seed(0))
    thread = threading.Thread(target=lambda: results.append(model.decode(latents)), name="holder")
    thread.start()
    assert inside.wait(30)
    return latents, release, results, thread


def test_a_second_thread_cannot_decode_or_encode_while_one_decodes(model):
    latents, release, results, thread = hold_inside_decode(model)
    try:
        with pytest.raises(RuntimeError, match="in use by another thread"):
            model.decode(latents)
        frame = np.zeros((32, 32, 3), dtype=np.uint8)
        with pytest.raises(RuntimeError, match="in use by another thread"):
            model.encode_condition(9, 32, 32, image=frame)
        with pytest.raises(RuntimeError, match="in use by another thread"):
            model.encode_action_clips([np.zeros((9, 32, 32, 3), dtype=np.uint8)], 256, 9)
        assert not model._conditions  # the refused encode cached nothing
    finally:
        release.set()
        thread.join(30)
    del model.vae.decode  # the module's own method again
    np.testing.assert_array_equal(results[0], model.decode(latents))  # the held call ran undisturbed
    assert model._owner is None


def test_calls_nest_within_one_thread(model):
    with model.exclusive("outer"):
        with model.exclusive("inner"):
            assert model._owner == threading.get_ident()
        assert model._owner == threading.get_ident()  # the inner call did not release the outer one
    assert model._owner is None

"""The PyTorch reference of the IMPALA learner (benchmarks/peers/torch_impala_learner.py) computes
the JAX learner's loss and update: same parameters, same batch, same numbers.

torch is no requirement of the project or CI (benchmarks/peers/requirements-torch.txt), so this
is skipped where it is not installed.
"""

import importlib.util
import pathlib

import pytest

pytest.importorskip("torch")

PEER = (pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "peers"
        / "torch_impala_learner.py")


def _peer():
    spec = importlib.util.spec_from_file_location("torch_impala_learner", PEER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_learner_matches_jax_loss_and_update():
    # The config's network, loss and optimizer with B=2 unrolls (the network and T=20 are the
    # config's), a batch with episode ends and pseudo steps, from the JAX initial parameters.
    r = _peer().jax_reference(batch_size=2, pseudo_steps=True)
    assert r["params"][0] == r["params"][1] == 678_039
    assert r["loss_rel_err"] <= 1e-4, r
    # One update: the gradient (clipped: its norm is far above 40) and the RMSProp step.
    jax_norm, torch_norm = r["grad_norm"]
    assert jax_norm > 40
    assert torch_norm == pytest.approx(jax_norm, rel=1e-4)
    assert r["update_rel_err"] <= 1e-3, r

"""Both agents' RMSProp matches the TensorFlow RMSProp of the papers on its first step.

TensorFlow's RMSProp (the optimizer of both papers' implementations) starts its mean square at
1 and adds epsilon inside the square root; optax's `rmsprop` starts at 0 unless told otherwise,
which makes the first steps up to 1/sqrt(eps) larger. The first update is checked against the
closed form in float64.
"""

import dataclasses

import numpy as np
import pytest

from agents.apex.config import ApexConfig
from agents.apex.learner import make_optimizer as apex_optimizer
from agents.impala.config import ImpalaConfig
from agents.impala.learner import make_optimizer as impala_optimizer


def first_update(optimizer, grads):
    params = np.zeros_like(grads)
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    return np.asarray(updates, np.float64)


GRADS = np.array([1e-4, -0.03, 0.5, -2.0, 40.0], np.float32)


def test_impala_rmsprop_first_step_is_tensorflows():
    config = ImpalaConfig()  # the paper's: lr 0.0006, decay 0.99, eps 0.01, starts at 1
    g = GRADS.astype(np.float64)
    mean_square = config.rms_decay * 1.0 + (1 - config.rms_decay) * g**2
    expected = -config.learning_rate * g / np.sqrt(mean_square + config.optimizer_epsilon)
    np.testing.assert_allclose(first_update(impala_optimizer(config), GRADS), expected,
                               rtol=1e-5)


def test_apex_centered_rmsprop_first_step_is_tensorflows():
    config = ApexConfig()  # the paper's: lr 0.00025 / 4, decay 0.95, eps 1.5e-7, centered
    g = GRADS.astype(np.float64)
    mean_square = config.rms_decay * 1.0 + (1 - config.rms_decay) * g**2
    mean = (1 - config.rms_decay) * g
    expected = (-config.learning_rate * g
                / np.sqrt(mean_square - mean**2 + config.optimizer_epsilon))
    np.testing.assert_allclose(first_update(apex_optimizer(config), GRADS), expected,
                               rtol=1e-5)


@pytest.mark.parametrize("make, config", [(impala_optimizer, ImpalaConfig()),
                                          (apex_optimizer, ApexConfig())])
def test_starting_at_zero_would_make_the_first_steps_much_larger(make, config):
    ours = np.abs(first_update(make(config), GRADS))
    optax_default = np.abs(first_update(
        make(dataclasses.replace(config, rms_initial_scale=0.0)), GRADS))
    assert (optax_default[:3] > 3 * ours[:3]).all()

"""The Ape-X learner: one jitted, data-parallel update, and the thread loop around it.

Horgan et al. 2018 (arXiv:1803.00933), Algorithm 2: sample a prioritized batch, apply the
n-step double-Q update with importance weights, send the new priorities back to the replay,
periodically copy the target network and publish the parameters to the actors.
"""

import queue
import threading
import time
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents.apex.config import ApexConfig
from agents.apex.losses import apex_loss, double_q_td_errors
from agents.parallel import sharding
from agents.parallel.zero import ZeroOptimizer, canonical_opt_state
from agents.run.divergence import describe, health
from agents.run.interfaces import TransitionReplay
from agents.run.param_server import ParamServer
from replay.prioritized import Sample
from replay.rate_limiter import MinSize


class TrainingState(NamedTuple):
    params: Any
    target_params: Any
    opt_state: Any
    steps: jax.Array  # [] int32 updates applied


def make_optimizer(config: ApexConfig) -> optax.GradientTransformation:
    """Centered RMSProp (the paper's) or Adam; the global-norm clip is `ZeroOptimizer`'s."""
    if config.optimizer == "rmsprop_centered":
        # eps inside the square root, as in the DQN-family RMSProp the paper's epsilon refers to.
        return optax.rmsprop(config.learning_rate, decay=config.rms_decay,
                             eps=config.optimizer_epsilon, centered=True,
                             initial_scale=config.rms_initial_scale)
    return optax.adam(config.learning_rate, eps=config.optimizer_epsilon)


def init_state(network: nn.Module, optimizer: optax.GradientTransformation,
               sample_obs: np.ndarray, key: jax.Array) -> TrainingState:
    """Fresh parameters for observations shaped like `sample_obs` `[*obs_shape]`, with the
    optimizer state in `ZeroOptimizer`'s canonical form (any stage, any device count)."""
    params = network.init(key, sample_obs[None])
    # A separate copy: the update donates the state, and one buffer cannot be donated twice.
    target_params = jax.tree.map(jnp.copy, params)
    return TrainingState(params, target_params, canonical_opt_state(optimizer, params),
                         jnp.zeros((), jnp.int32))


def make_update(network: nn.Module, config: ApexConfig, mesh: jax.sharding.Mesh,
                params: Any) -> tuple[Any, ZeroOptimizer]:
    """(`update(state, batch) -> (state, metrics, priorities [B])`, its `ZeroOptimizer`).

    Data-parallel over `mesh` with ZeRO stage `config.zero_stage`; `batch` holds obs `[B, ...]`,
    action, reward, discount, next_obs and weights `[B]`. Place the state with
    `zero.place_state` first.
    """
    zero = ZeroOptimizer(make_optimizer(config), params, mesh.devices.size, config.zero_stage,
                         config.max_grad_norm)

    def loss_fn(params, target_params, batch):
        q_tm1 = network.apply(params, batch["obs"])  # [b, A]
        q_t_online = network.apply(params, batch["next_obs"])  # [b, A]
        q_t_target = network.apply(target_params, batch["next_obs"])  # [b, A]
        td = double_q_td_errors(q_tm1, batch["action"], batch["reward"], batch["discount"],
                                q_t_online, q_t_target)  # [b]
        loss = apex_loss(td, batch["weights"], config.loss, config.huber_delta)
        return loss, (td, jnp.mean(q_tm1))

    def update(state: TrainingState, batch):
        (loss, (td, mean_q)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            sharding.per_device(state.params), state.target_params, batch)
        # Equal shards, so the mean of the shard means is the full batch's mean gradient.
        params, opt_state, grad_norm = zero.step(state.params, grads, state.opt_state)
        steps = state.steps + 1
        copy = steps % config.target_update_period == 0
        target_params = jax.tree.map(lambda p, t: jnp.where(copy, p, t), params,
                                     state.target_params)
        metrics = jax.lax.pmean(dict(loss=loss, mean_abs_td=jnp.mean(jnp.abs(td)),
                                     mean_q=mean_q), sharding.BATCH_AXIS)
        metrics["grad_norm"] = grad_norm
        metrics["health"] = health(metrics["loss"], params)
        return TrainingState(params, target_params, opt_state, steps), metrics, jnp.abs(td)

    return sharding.data_parallel(update, mesh, state_spec=zero.state_specs(TrainingState)), zero


def sample_to_batch(sample: Sample) -> dict[str, np.ndarray]:
    """The learner's batch: the sampled transitions plus their importance weights."""
    return dict(sample.transitions, weights=sample.weights)


class ApexLearner:
    """Runs updates in its own thread, fed by prefetching sampler threads.

    Args:
      config: the run's settings.
      network: the Q-network.
      replay: the shared prioritized replay (in this process, or sharded over Ray workers).
      param_server: where parameters are published for the actors.
      state: initial (or restored) `TrainingState`.
      mesh: the learner devices.
      samplers: sampler threads, each with one batch request in flight (more than one only
        pays where a sample waits on the network: replay shards on Ray).
      rate_limiter: the replay's rate limiter, whose waits the metrics report (None: not
        visible here; each Ray shard's replay owns its own).
    """

    def __init__(self, config: ApexConfig, network: nn.Module, replay: TransitionReplay,
                 param_server: ParamServer, state: TrainingState, mesh: jax.sharding.Mesh,
                 samplers: int = 1, rate_limiter: MinSize | None = None):
        sharding.check_divisible(config.batch_size, mesh)
        self.config, self.replay, self.param_server, self.mesh = config, replay, param_server, mesh
        self.samplers, self.rate_limiter = samplers, rate_limiter
        self._update, self._zero = make_update(network, config, mesh, state.params)
        self.state = self._zero.place_state(state, mesh)
        self._batches: queue.Queue = queue.Queue(maxsize=max(2, samplers))
        # Held while an update is dispatched: the old state's buffers are donated to it, so a
        # reader must never see a state that is being consumed.
        self._state_lock = threading.Lock()
        self.metrics: dict[str, float] = {}
        self.updates = int(state.steps)
        self.waits = dict(sample_s=0.0, batch_s=0.0)
        self._waits_lock = threading.Lock()  # the sampler threads add to waits["sample_s"]
        self.param_server.publish(state.params)
        self.diverged: str | None = None  # what went non-finite, at which update

    def threads(self) -> list[tuple[str, Any]]:
        """The sampler threads and the learner thread."""
        names = ["prefetch"] if self.samplers == 1 else [
            f"prefetch-{k}" for k in range(self.samplers)]
        return [(name, self.prefetch) for name in names] + [("learner", self.run)]

    def prefetch(self, stop: threading.Event) -> None:
        """Sampler thread: keeps the next batches ready while the device computes. The replay's
        rate limiter holds it through the warm-up (and to the samples-per-insert ratio)."""
        while not stop.is_set():
            start = time.perf_counter()
            sample = self.replay.sample(self.config.batch_size)
            with self._waits_lock:
                self.waits["sample_s"] += time.perf_counter() - start
            if sample is None:  # the replay was closed: the run is stopping
                continue
            while not stop.is_set():
                try:
                    self._batches.put(sample, timeout=0.1)
                    break
                except queue.Full:
                    continue

    def run(self, stop: threading.Event) -> None:
        """Learner thread: update, write priorities back, publish parameters."""
        pending = None  # (ids, priorities, health, update) of the update in flight
        while not stop.is_set():
            start = time.perf_counter()
            try:
                sample = self._batches.get(timeout=0.1)
            except queue.Empty:
                continue
            self.waits["batch_s"] += time.perf_counter() - start
            # Transfers for the learner stay in the learner's thread.
            batch = sharding.put_batch(sample_to_batch(sample), self.mesh)
            with self._state_lock:
                self.state, metrics, priorities = self._update(self.state, batch)
            # Dispatch is asynchronous: finish the previous update's host work while this one
            # runs on the device.
            if pending is not None and not self._write_back(pending, stop):
                return
            self.updates += 1
            pending = (sample.ids, priorities, metrics.pop("health"), self.updates)
            if self.updates % self.config.publish_period == 0:
                self.param_server.publish(self.state.params)
            self.metrics = metrics
        if pending is not None:
            self._write_back(pending, stop)

    def _write_back(self, pending: tuple, stop: threading.Event) -> bool:
        """Writes an update's priorities back, read where the host waits for that update
        anyway. First checks its loss and parameters: a non-finite update stops the run
        (`diverged`) and its NaN priorities never reach the replay. Returns False then."""
        ids, priorities, values, update = pending
        self.diverged = describe(update, np.asarray(values))
        if self.diverged is not None:
            stop.set()
            return False
        self.replay.update_priorities(ids, np.asarray(priorities))
        return True

    def host_state(self) -> TrainingState:
        """A host copy of the training state, optimizer state in canonical form (checkpoints)."""
        with self._state_lock:
            return self._zero.host_state(self.state)

    def host_metrics(self) -> dict[str, float]:
        """The latest update's metrics as Python floats, and the cumulative seconds spent
        sampling (summed over the sampler threads; held back by the replay's rate limiter
        included), waiting for a batch, and the time the rate limiter held the actors and the
        learner back."""
        waits = dict(sample_s=self.waits["sample_s"], learner_wait_s=self.waits["batch_s"])
        limiter = self.rate_limiter
        if limiter is not None:
            waits.update(actors_throttled_s=limiter.waited_s["insert"],
                         learner_throttled_s=limiter.waited_s["sample"])
        return {k: float(v) for k, v in self.metrics.items()} | waits

"""The IMPALA learner: dynamic batching of unrolls, one data-parallel V-trace update.

Espeholt et al. 2018 (arXiv:1802.01561), Sec. 3 and 4: the learner takes batches of unrolls
from the actors' queue as they come, corrects the policy lag with V-trace, and publishes its
parameters back to the actors.
"""

import threading
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents.impala.config import ImpalaConfig
from agents.impala.losses import impala_loss
from agents.impala.unroll_queue import UnrollQueue
from agents.parallel import sharding, step_counts
from agents.parallel.zero import ZeroOptimizer, canonical_opt_state
from agents.run.divergence import DivergenceWatch, health
from agents.run.param_server import ParamServer
from agents.run.stats import RunStats

# The counters a run sums over its processes (`agents.parallel.step_counts`).
SUMMED = ("env_steps", "episodes")

# The loss's terms (sums over steps in `impala_loss`); its other metrics are per-step means.
LOSS_TERMS = ("loss", "pg_loss", "baseline_loss", "entropy_loss")


def count_lags(counts: np.ndarray, lag: np.ndarray) -> tuple[np.ndarray, float]:
    """Adds a batch's policy lags (`[B, T]` ints, learner minus acting version) to the
    histogram `counts` (`counts[k]`: steps trained on with lag k) and returns it with the mean
    lag of every step counted so far."""
    batch = np.bincount(np.maximum(np.asarray(lag), 0).ravel())
    if len(batch) > len(counts):
        counts = np.pad(counts, (0, len(batch) - len(counts)))
    counts = counts.copy()
    counts[:len(batch)] += batch
    return counts, float(np.arange(len(counts)) @ counts / max(counts.sum(), 1))


class TrainingState(NamedTuple):
    params: Any
    opt_state: Any
    steps: jax.Array  # [] int32 updates applied


def make_optimizer(config: ImpalaConfig) -> optax.GradientTransformation:
    """RMSProp (or Adam) with the rate annealed linearly to 0; the global-norm clip is
    `ZeroOptimizer`'s.

    RMSProp follows the TensorFlow optimizer the paper's implementation used: epsilon inside
    the square root, sqrt(E[g^2] + eps) (optax's `eps_in_sqrt=True`), no momentum. With the
    paper's eps = 0.01 this bounds the step for tiny gradients, which eps outside the root would
    not do as strongly; and the mean square starts at `rms_initial_scale` (TensorFlow: 1), so
    the first steps are about lr * g rather than lr * g / sqrt((1 - decay) g^2 + eps).
    """
    schedule = optax.linear_schedule(config.learning_rate, 0.0, config.total_updates)
    if config.optimizer == "rmsprop":
        return optax.rmsprop(schedule, decay=config.rms_decay, eps=config.optimizer_epsilon,
                             initial_scale=config.rms_initial_scale, eps_in_sqrt=True)
    return optax.adam(schedule, eps=config.optimizer_epsilon)


def init_state(network: nn.Module, optimizer: optax.GradientTransformation,
               sample_obs: np.ndarray, key: jax.Array) -> TrainingState:
    """Fresh parameters, with the optimizer state in `ZeroOptimizer`'s canonical form."""
    params = network.init(key, sample_obs[None])
    return TrainingState(params, canonical_opt_state(optimizer, params),
                         jnp.zeros((), jnp.int32))


def make_update(network: nn.Module, config: ImpalaConfig, mesh: jax.sharding.Mesh,
                params: Any) -> tuple[Any, ZeroOptimizer]:
    """(`update(state, batch) -> (state, metrics)`, its `ZeroOptimizer`) over unrolls
    `[B, T(+1), ...]` split on B, with ZeRO stage `config.zero_stage`."""
    # Each shard's loss is its part of the whole batch's (a sum, or a sum over all real steps'
    # count), so the devices' gradients add up.
    zero = ZeroOptimizer(make_optimizer(config), params, mesh.devices.size, config.zero_stage,
                         config.max_grad_norm, grad_reduction="sum")

    def loss_fn(params, batch):
        time_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), batch)  # [T(+1), b, ...]
        logits, values = network.apply(params, time_major["obs"])  # [T+1, b, A], [T+1, b]
        loss, metrics = impala_loss(
            logits[:-1], values, time_major["actions"], time_major["behaviour_logits"],
            time_major["rewards"] * config.reward_scale, time_major["discounts"],
            time_major["episode_ends"], time_major["masks"], baseline_cost=config.baseline_cost,
            entropy_cost=config.entropy_cost, lambda_=config.lambda_,
            clip_rho_threshold=config.rho_bar, clip_c_threshold=config.c_bar,
            clip_pg_rho_threshold=config.pg_rho_bar, correction=config.correction,
            epsilon=config.epsilon_correction, reduction="sum")
        # The reduction is over the whole batch, not each device's shard: a sum needs no
        # normalizer, a mean divides by the real steps of all shards together. The logged
        # loss terms are the whole batch's, with the run's reduction.
        # The per-step means are weighted by each shard's real steps.
        steps = jnp.sum(time_major["masks"])  # [] this shard's real steps
        all_steps = jnp.maximum(jax.lax.psum(steps, sharding.BATCH_AXIS), 1.0)  # []
        scale = 1.0 / all_steps if config.reduction == "mean" else 1.0
        metrics = {k: jax.lax.psum(v if k in LOSS_TERMS else v * steps, sharding.BATCH_AXIS)
                   * (scale if k in LOSS_TERMS else 1.0 / all_steps)
                   for k, v in metrics.items()}
        return loss * scale, metrics

    def update(state: TrainingState, batch):
        grads, metrics = jax.grad(loss_fn, has_aux=True)(
            sharding.per_device(state.params), batch)
        params, opt_state, grad_norm = zero.step(state.params, grads, state.opt_state)
        metrics = dict(metrics, grad_norm=grad_norm, health=health(metrics["loss"], params))
        return TrainingState(params, opt_state, state.steps + 1), metrics

    return sharding.data_parallel(update, mesh, state_spec=zero.state_specs(TrainingState),
                                  per_example_output=False), zero


class ImpalaLearner:
    """Takes unrolls from the queue in batches and updates, in its own thread.

    Args:
      config: the run's settings.
      network: the policy-value network.
      unrolls: the channel the actors put unrolls into (`UnrollQueue`; `UnrollReplay` mixes
        replayed unrolls into each batch); the learner takes this process's share of each
        batch from it (dynamic batching).
      param_server: where parameters are published for the actors.
      state: initial (or restored) `TrainingState`.
      mesh: the learner devices (across processes with `jax.distributed`).
      unroll_spec: `agents.impala.unroll.unroll_spec`: the fields of one unroll.
      stats: the run's counters; with several processes each update adds the other
        processes' env steps and episodes to them (None: not counted across processes).
    """

    def __init__(self, config: ImpalaConfig, network: nn.Module, unrolls: UnrollQueue,
                 param_server: ParamServer, state: TrainingState, mesh: jax.sharding.Mesh,
                 unroll_spec: dict, stats: RunStats | None = None):
        sharding.check_divisible(config.batch_size, mesh)
        # With several processes each feeds its share of every batch (`put_batch`).
        self.local_batch_size = config.batch_size // jax.process_count()
        self.unroll_spec = {k: v for k, v in unroll_spec.items()
                            if k not in ("param_versions", "env_ids")}
        self._sync = step_counts.make_sync(mesh)
        self.stats = stats
        self.config, self.unrolls, self.param_server, self.mesh = (
            config, unrolls, param_server, mesh)
        self._update, self._zero = make_update(network, config, mesh, state.params)
        self.state = self._zero.place_state(state, mesh)
        self._state_lock = threading.Lock()  # see ApexLearner: the update donates the state
        self.updates = int(state.steps)
        self.version = self.param_server.publish(state.params)
        self.metrics: dict[str, Any] = {}
        self.lag = dict(policy_lag_mean=float("nan"), policy_lag_max=float("nan"))
        # The lag of every step this learner has trained on (this start of the run), for
        # its distribution over the run rather than one batch's snapshot.
        self.lag_counts = np.zeros(1, np.int64)
        # Whether the loss and parameters stay finite, read without a device sync per update.
        self._watch = DivergenceWatch()
        self.diverged: str | None = None  # what went non-finite, at which update

    def threads(self) -> list[tuple[str, Any]]:
        """One thread: dynamic batching and updates."""
        return [("learner", self.run)]

    def _stop_everywhere(self, stop: threading.Event) -> bool:
        """Whether any process asked to stop; every process learns it at the same update, so
        none is left waiting in a collective the others never join. A stop asked elsewhere
        stops this process's threads too. The same collective sums the processes' env steps
        and episodes into `stats`."""
        if jax.process_count() == 1:
            return stop.is_set()
        own = self.stats.since_start(SUMMED) if self.stats is not None else [0] * len(SUMMED)
        anywhere, totals = self._sync(stop.is_set(), own)
        if self.stats is not None:
            self.stats.set_others({name: total - mine
                                   for name, total, mine in zip(SUMMED, totals, own)})
        if anywhere:
            stop.set()
        return anywhere

    def _idle_batch(self) -> dict[str, np.ndarray]:
        """A batch of pseudo steps only (masks 0): no gradient. With several processes it stands
        in for a batch this one could not finish because it is stopping, so the others' update
        still completes; the next `_stop_everywhere` then ends them all."""
        return {name: np.zeros((self.local_batch_size,) + shape, dtype)
                for name, (shape, dtype) in self.unroll_spec.items()}

    def run(self, stop: threading.Event) -> None:
        self._train(stop)
        # Updates still unread when the run stopped: the final checkpoint's state is theirs.
        self.diverged = self.diverged or self._watch.drain()

    def _train(self, stop: threading.Event) -> None:
        while not self._stop_everywhere(stop):
            batch = self.unrolls.get_batch(self.local_batch_size, stop)
            if batch is None:
                if jax.process_count() == 1:
                    return
                fields, lag = self._idle_batch(), None
            else:
                lag = self.version - batch.param_versions  # [B, T] learner - acting version
                fields = batch._asdict()
                del fields["param_versions"], fields["env_ids"]
            # Transfers for the learner stay in the learner's thread.
            on_device = sharding.put_batch(fields, self.mesh)
            with self._state_lock:
                self.state, metrics = self._update(self.state, on_device)
            self.updates += 1
            self._check(metrics.pop("health"), stop)
            self.metrics = metrics
            if self.updates % self.config.publish_period == 0:
                self.version = self.param_server.publish(self.state.params)
            if lag is not None:
                self.lag_counts, run_mean = count_lags(self.lag_counts, lag)
                self.lag = dict(policy_lag_mean=float(lag.mean()),
                                policy_lag_max=float(lag.max()), policy_lag_run_mean=run_mean)

    def _check(self, values, stop: threading.Event) -> None:
        """Stops the run at the first update whose loss or parameters are not finite. The stop
        goes through `stop`, so with several processes all leave at the same update."""
        if self.diverged is None and (diverged := self._watch.add(self.updates, values)):
            self.diverged = diverged
            stop.set()

    def host_state(self) -> TrainingState:
        """A host copy of the training state, optimizer state in canonical form (checkpoints)."""
        with self._state_lock:
            return self._zero.host_state(self.state)

    def host_metrics(self) -> dict[str, float]:
        """The latest update's metrics, the policy lag and the cumulative seconds the learner
        waited for unrolls."""
        metrics = sharding.local_copy(self.metrics)
        return ({k: float(v) for k, v in metrics.items()} | self.lag
                | dict(learner_wait_s=self.unrolls.waited_s))

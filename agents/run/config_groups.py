"""Groups of settings that several agent configs share, each declared and documented once.

An agent's config is `RunConfig` plus the groups it uses plus its own algorithm's settings:
`ApexConfig(RunConfig, NetworkConfig, OptimizerConfig, RayConfig)`,
`ImpalaConfig(RunConfig, NetworkConfig, OptimizerConfig, MultiProcessConfig)`. An agent
redeclares a field only to change its default (the flag's help stays the group's text unless
the agent documents the field again). Each group checks its own fields in `check_<group>`,
which the agent config's `__post_init__` calls.
"""

import dataclasses
from typing import ClassVar

from agents.run.config import check_fields

BACKENDS = ("threads", "ray")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """The network's torso; each is also a command-line flag of the same name.

    Attributes:
      torso: network torso: mlp (vectors) or nature, impala_shallow, impala_resnet (frames).
      mlp_hidden_sizes: widths of the mlp torso.
      norm: conv torso normalization: none, group or layer (Wu & He 2018).
      num_groups: GroupNorm groups when norm=group (must divide every conv width).
    """

    torso: str = "nature"
    mlp_hidden_sizes: tuple[int, ...] = (256, 256)
    norm: str = "none"
    num_groups: int = 8

    def check_network(self) -> None:
        """Raises a ValueError for torso settings that cannot build (a num_groups that misses a
        conv width) or would be ignored (a norm on the mlp torso)."""
        import networks  # here: the flax modules' own checks, no parameters built

        check_fields(self, choices=(("torso", networks.TORSOS), ("norm", networks.NORMS)))
        if any(h < 1 for h in self.mlp_hidden_sizes):
            raise ValueError(f"mlp_hidden_sizes must hold positive widths, "
                             f"got {self.mlp_hidden_sizes}")
        if self.torso == "mlp":
            if self.norm != "none":
                raise ValueError(f"norm={self.norm!r} applies to the conv torsos; torso=mlp has "
                                 "no normalization (use norm=none)")
            return
        networks.make_torso(self.torso, **self.torso_kwargs())

    def check_torso_fits(self, info) -> None:
        """Raises a ValueError naming --torso if the torso cannot read the env's observations
        (`info`, an `envs.EnvInfo`): mlp reads vectors, the conv torsos read frame stacks."""
        frames = len(info.obs_shape) == 3
        if frames if self.torso != "mlp" else len(info.obs_shape) == 1:
            return
        gives = "frame stacks" if frames else f"observations of shape {tuple(info.obs_shape)}"
        reads = "vectors" if self.torso == "mlp" else "frame stacks"
        fits = "nature, impala_shallow or impala_resnet" if frames else "mlp"
        raise ValueError(f"--torso={self.torso} does not fit this env: it gives {gives}, and "
                         f"torso={self.torso} reads {reads}; use --torso={fits}")

    def torso_kwargs(self) -> dict:
        """The keyword arguments of `networks.make_torso(self.torso, ...)`."""
        if self.torso == "mlp":
            return dict(hidden_sizes=self.mlp_hidden_sizes)
        return dict(norm=self.norm, num_groups=self.num_groups)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """The learner's optimizer; each is also a command-line flag of the same name.

    Attributes:
      optimizer: the paper's RMSProp or adam (each agent names its choices).
      learning_rate: step size.
      rms_decay: RMSProp decay.
      rms_initial_scale: RMSProp's starting mean square of the gradients: 1.0 as in the
        TensorFlow RMSProp both papers used; 0 (optax's default) makes the first steps up to
        1/sqrt(optimizer_epsilon) times larger.
      optimizer_epsilon: RMSProp epsilon, added inside the square root as in TensorFlow's
        RMSProp (or Adam's epsilon).
      max_grad_norm: global gradient norm clip.
    """

    optimizer: str = "rmsprop"
    learning_rate: float = 0.0006
    rms_decay: float = 0.99
    rms_initial_scale: float = 1.0
    optimizer_epsilon: float = 0.01
    max_grad_norm: float = 40.0

    OPTIMIZERS: ClassVar[tuple[str, ...]] = ("rmsprop", "adam")
    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = frozenset({
        "learning_rate", "rms_decay", "rms_initial_scale", "optimizer_epsilon",
        "max_grad_norm"})

    def check_optimizer(self) -> None:
        check_fields(self, non_negative=("learning_rate", "optimizer_epsilon", "max_grad_norm",
                                         "rms_initial_scale"),
                     unit_interval=("rms_decay",), choices=(("optimizer", self.OPTIMIZERS),),
                     finite=("learning_rate", "optimizer_epsilon", "rms_initial_scale"))


@dataclasses.dataclass(frozen=True)
class RayConfig:
    """Where actors and replay run: this process's threads, or a Ray cluster.

    Attributes:
      backend: threads (everything in this process) or ray (actor workers and replay shards
        are Ray actors, on any node of the cluster, the workers acting on their node's CPU;
        the learner and evaluator stay in this process, on learner_devices and actor_devices).
      ray_address: ray backend: local (start a loopback-only cluster on this host, stopped
        at the end) or the address of a running cluster (host:port, or auto).
      replay_shards: ray backend: replay shards; each actor adds to one of them and the
        learner samples all of them in proportion to their total priority.
      ray_cpus_per_actor: ray backend: CPUs Ray reserves for each actor worker (with the
        node's CPU count this sets how many actors a node runs).
      ray_object_store_mb: ray backend with ray_address=local: object store size in MiB (0:
        Ray's default, 30% of memory).
      ray_temp_dir: ray backend with ray_address=local: Ray's session folder (empty: Ray's
        default, /tmp/ray).
      ray_samples_in_flight: ray backend: batches the learner requests from the shards at once
        (one sampler thread each). A batch takes two round trips to the shards, so one at a
        time leaves the learner waiting on the network.
    """

    backend: str = "threads"
    ray_address: str = "local"
    replay_shards: int = 1
    ray_cpus_per_actor: float = 1.0
    ray_object_store_mb: int = 0
    ray_temp_dir: str = ""
    ray_samples_in_flight: int = 4

    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = frozenset({
        "backend", "ray_address", "ray_cpus_per_actor", "ray_object_store_mb", "ray_temp_dir",
        "ray_samples_in_flight"})

    def check_ray(self, num_actors: int) -> None:
        check_fields(self, positive=("replay_shards", "ray_samples_in_flight"),
                     non_negative=("ray_object_store_mb",), choices=(("backend", BACKENDS),))
        if self.backend == "threads" and self.replay_shards != 1:
            raise ValueError(f"replay_shards={self.replay_shards} needs backend=ray; the "
                             "threads backend has one replay")
        if self.replay_shards > num_actors:
            raise ValueError(f"replay_shards ({self.replay_shards}) must be <= num_actors "
                             f"({num_actors}): every shard needs an actor feeding it")
        if not self.ray_cpus_per_actor > 0:
            raise ValueError(f"ray_cpus_per_actor must be > 0, got {self.ray_cpus_per_actor}")


@dataclasses.dataclass(frozen=True)
class MultiProcessConfig:
    """One learner over several processes (hosts) with jax.distributed.

    Attributes:
      num_processes: processes (hosts) that train one learner together with jax.distributed;
        each runs its own actors and feeds batch_size / num_processes unrolls per update.
      process_id: this process's index, 0 .. num_processes - 1; process 0 evaluates, logs and
        checkpoints.
      coordinator_address: host:port of process 0's coordinator (needed when num_processes > 1).
    """

    num_processes: int = 1
    process_id: int = 0
    coordinator_address: str = ""

    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = frozenset({
        "num_processes", "process_id", "coordinator_address"})

    def check_processes(self, batch_size: int, zero_stage: int) -> None:
        check_fields(self, positive=("num_processes",))
        if not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"process_id must be in [0, num_processes={self.num_processes}), "
                             f"got {self.process_id}")
        if self.num_processes > 1:
            if not self.coordinator_address:
                raise ValueError("coordinator_address (host:port of process 0) is required "
                                 f"when num_processes={self.num_processes}")
            if zero_stage != 0:
                raise ValueError("zero_stage must be 0 when num_processes > 1 (partitioned "
                                 "optimizer state across processes is not supported)")
            if batch_size % self.num_processes:
                raise ValueError(f"batch_size={batch_size} must split evenly over "
                                 f"num_processes={self.num_processes}")

    def initialize_processes(self) -> None:
        """Joins the job's processes before anything else touches JAX (one process: nothing)."""
        from agents.parallel import (
            distributed,  # here: configs import without a JAX backend
        )

        distributed.initialize(self.num_processes, self.process_id, self.coordinator_address,
                               self.connect_timeout_s)

    def shutdown_processes(self) -> None:
        """Leaves the job with the other processes once this one's run ended well (one
        process: nothing). A failed process skips it: the others learn of the failure from
        the coordination service and stop too."""
        from agents.parallel import distributed

        distributed.shutdown(self.num_processes)

"""The IMPALA learner update of the Pong CPU config in PyTorch on the CPU: a reference point.

The same network, loss and optimizer as the jitted update of
`experiments/configs/impala_pong_cpu_group_norm_batch8.cfg` (`agents.impala.learner`), in float32:

    frames [N, 4, 84, 84] uint8 / 255 (envpool's stack axis is already torch's channel axis)
    conv 16 8x8/4 VALID -> GroupNorm(8) -> ReLU        84 -> 20
    conv 32 4x4/2 VALID -> GroupNorm(8) -> ReLU        20 -> 9
    flatten in (h, w, c) order, as the JAX torso       2592
    dense 256 ReLU, then policy logits [A] and baseline [1] (two linear heads)

One update: forward over the B * (T + 1) frames of the batch, V-trace targets (rho_bar = c_bar =
1, lambda 1, traces cut at episode ends and before pseudo steps) without gradient, the loss
pg + 0.5 * baseline + 0.01 * entropy summed over the real steps, backward, global-norm clip to
40, and TensorFlow-style RMSProp (eps inside the square root, mean square starting at 1) with
the rate annealed linearly to 0, as `agents.impala.learner.make_optimizer`. The loss's logged
diagnostics (KL, trace product, ...) are not computed; the JAX update's cost them little.

torch is not a requirement of the project; benchmarks/peers/requirements-torch.txt says how to
install the pinned CPU wheel beside it. Then

    PYTHONPATH=.:.venv-peers/torch-site .venv/bin/python benchmarks/peers/torch_impala_learner.py
        [--variants default,channels_last,...] [--seconds 8] [--rounds 2] [--check]

times the update under each of VARIANTS (each in its own process, in turn, `--rounds` times;
the figures are in benchmarks/bench_learner_torch.py's docstring) or, with --check, compares
the loss and one update with the JAX learner's from the same parameters and batch (the full
B=8 batch; tests/benchmarks/test_torch_impala_learner.py does the same with B=2).
"""

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

CONFIG = "experiments/configs/impala_pong_cpu_group_norm_batch8.cfg"


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the torch update needs of an `ImpalaConfig` (plain values: no JAX in a worker)."""
    unroll_length: int = 20
    batch_size: int = 8
    num_actions: int = 6
    obs_shape: tuple[int, ...] = (4, 84, 84)
    num_groups: int = 8
    hidden_size: int = 256
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    learning_rate: float = 6e-4
    rms_decay: float = 0.99
    optimizer_epsilon: float = 0.01
    rms_initial_scale: float = 1.0
    max_grad_norm: float = 40.0
    total_updates: int = 31_250


def settings_from_config(config, info) -> Settings:
    """`Settings` of an `ImpalaConfig` and its `EnvInfo`, after checking that the config is the
    variant implemented here."""
    expected = dict(torso="impala_shallow", reduction="sum", correction="vtrace",
                    optimizer="rmsprop", lambda_=1.0, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0)
    wrong = {k: getattr(config, k) for k, v in expected.items() if getattr(config, k) != v}
    kwargs = config.torso_kwargs()
    if wrong or kwargs.get("norm") != "group" or not info.channels_first:
        raise ValueError(f"the torch peer implements {expected} with norm=group on "
                         f"channels-first frames; the config has {wrong}, {kwargs}")
    return Settings(config.unroll_length, config.batch_size, info.num_actions,
                    tuple(info.obs_shape), kwargs["num_groups"], 256, config.baseline_cost,
                    config.entropy_cost, config.learning_rate, config.rms_decay,
                    config.optimizer_epsilon, config.rms_initial_scale, config.max_grad_norm,
                    config.total_updates)


def _lecun_normal_(weight: torch.Tensor, fan_in: int) -> None:
    """flax's default kernel init: truncated normal of variance 1 / fan_in."""
    std = (1.0 / fan_in) ** 0.5 / 0.87962566103423978
    nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)


class ShallowPolicyValueNet(nn.Module):
    """`PolicyValueNetwork(torso="impala_shallow", norm="group")` on `[N, 4, 84, 84]` uint8."""

    def __init__(self, s: Settings, channels_last: bool = False):
        super().__init__()
        c = s.obs_shape[0]
        self.channels_last = channels_last
        self.conv_0 = nn.Conv2d(c, 16, 8, stride=4)
        self.norm_0 = nn.GroupNorm(s.num_groups, 16, eps=1e-5)
        self.conv_1 = nn.Conv2d(16, 32, 4, stride=2)
        self.norm_1 = nn.GroupNorm(s.num_groups, 32, eps=1e-5)
        h = (((s.obs_shape[1] - 8) // 4 + 1) - 4) // 2 + 1  # 84 -> 20 -> 9
        self.dense = nn.Linear(h * h * 32, s.hidden_size)
        self.policy = nn.Linear(s.hidden_size, s.num_actions)
        self.baseline = nn.Linear(s.hidden_size, 1)
        for layer in (self.conv_0, self.conv_1, self.dense, self.policy, self.baseline):
            _lecun_normal_(layer.weight, layer.weight[0].numel())
            nn.init.zeros_(layer.bias)
        if channels_last:
            self.to(memory_format=torch.channels_last)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits `[N, A]`, values `[N]`) for frames `[N, C, H, W]` uint8."""
        x = obs.to(torch.float32) / 255.0  # as frames_to_float: a division, not * (1 / 255)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        x = F.relu(self.norm_0(self.conv_0(x)))
        x = F.relu(self.norm_1(self.conv_1(x)))
        # (h, w, c) order as the JAX torso's NHWC flatten, so its dense kernel copies as is;
        # with channels_last memory this view needs no copy.
        x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)  # [N, 2592]
        x = F.relu(self.dense(x))
        return self.policy(x), self.baseline(x)[:, 0]


def impala_loss(logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor,
                behaviour_logits: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
                episode_ends: torch.Tensor, masks: torch.Tensor, baseline_cost: float,
                entropy_cost: float) -> torch.Tensor:
    """`agents.impala.losses.impala_loss` for correction="vtrace", rho_bar = c_bar = pg_rho_bar =
    1, lambda 1, reduction "sum"; time-major: logits `[T, B, A]`, values `[T+1, B]`, the rest
    `[T, B]`."""
    log_probs = F.log_softmax(logits, dim=-1)  # [T, B, A]
    target_log_probs = log_probs.gather(-1, actions[..., None])[..., 0]  # [T, B]
    with torch.no_grad():
        behaviour_log_probs = F.log_softmax(behaviour_logits, dim=-1).gather(
            -1, actions[..., None])[..., 0]
        rhos = torch.exp(target_log_probs - behaviour_log_probs)  # [T, B]
        next_is_pseudo = torch.cat([masks[1:] == 0, torch.zeros_like(masks[:1], dtype=bool)])
        continue_t = 1.0 - (episode_ends | next_is_pseudo).to(values.dtype)  # [T, B]
        v_tm1, v_t = values[:-1], values[1:]
        clipped = torch.clamp(rhos, max=1.0)  # rho_bar = c_bar = pg_rho_bar = 1, lambda 1
        delta = clipped * (rewards + discounts * v_t - v_tm1)
        trace = discounts * clipped * continue_t
        corrections = torch.empty_like(delta)
        acc = torch.zeros_like(delta[0])
        for t in range(delta.shape[0] - 1, -1, -1):
            acc = delta[t] + trace[t] * acc
            corrections[t] = acc
        vs = v_tm1 + corrections
        next_corrections = torch.cat([corrections[1:], torch.zeros_like(corrections[:1])])
        pg_advantages = clipped * (rewards + discounts * (v_t + continue_t * next_corrections)
                                   - v_tm1)
    entropy = -torch.sum(torch.exp(log_probs) * log_probs, dim=-1)  # [T, B]
    pg_loss = -torch.sum(masks * target_log_probs * pg_advantages)
    baseline_loss = 0.5 * torch.sum(masks * torch.square(vs - values[:-1]))
    entropy_loss = -torch.sum(masks * entropy)
    return pg_loss + baseline_cost * baseline_loss + entropy_cost * entropy_loss


class TorchLearner:
    """The update on flat parameter and gradient buffers: clip and RMSProp are a few ops over
    one vector, as `ZeroOptimizer` does with its flat layout.

    Options: channels_last (memory format of the conv activations), compile (torch.compile of
    forward + loss, inductor backend).
    """

    def __init__(self, s: Settings, channels_last: bool = False, compile: bool = False,
                 seed: int = 0):
        torch.manual_seed(seed)
        self.s = s
        self.model = ShallowPolicyValueNet(s, channels_last)
        params = list(self.model.parameters())
        self.num_params = sum(p.numel() for p in params)
        self.flat = torch.zeros(self.num_params)
        self.flat_grad = torch.zeros(self.num_params)
        offset = 0
        for p in params:  # every parameter and its gradient a view of the flat buffers
            n = p.numel()
            view = self.flat[offset:offset + n]
            if p.dim() == 4 and channels_last:
                shaped = view.view(p.shape[0], p.shape[2], p.shape[3], p.shape[1]).permute(
                    0, 3, 1, 2)
                grad = self.flat_grad[offset:offset + n].view(
                    p.shape[0], p.shape[2], p.shape[3], p.shape[1]).permute(0, 3, 1, 2)
            else:
                shaped = view.view(p.shape)
                grad = self.flat_grad[offset:offset + n].view(p.shape)
            shaped.copy_(p.data)
            p.data = shaped
            p.grad = grad
            offset += n
        self.nu = torch.full((self.num_params,), s.rms_initial_scale)
        self.steps = 0
        self._loss = torch.compile(self._forward_loss) if compile else self._forward_loss

    def _forward_loss(self, obs, actions, behaviour_logits, rewards, discounts, episode_ends,
                      masks):
        B, T1 = obs.shape[:2]
        logits, values = self.model(obs.reshape((B * T1,) + obs.shape[2:]))
        logits = logits.view(B, T1, -1).transpose(0, 1)  # [T+1, B, A]
        values = values.view(B, T1).transpose(0, 1)  # [T+1, B]
        tm = lambda x: x.transpose(0, 1)  # noqa: E731  [B, T] -> [T, B]
        return impala_loss(logits[:-1], values, tm(actions), tm(behaviour_logits), tm(rewards),
                           tm(discounts), tm(episode_ends), tm(masks), self.s.baseline_cost,
                           self.s.entropy_cost)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._loss(batch["obs"], batch["actions"], batch["behaviour_logits"],
                          batch["rewards"], batch["discounts"], batch["episode_ends"],
                          batch["masks"])

    def update(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """One update on a batch of `[B, T(+1), ...]` tensors; returns (loss, gradient norm)."""
        s = self.s
        self.flat_grad.zero_()
        loss = self.loss(batch)
        loss.backward()  # accumulates into the flat gradient's views
        with torch.no_grad():
            g = self.flat_grad
            norm = torch.linalg.vector_norm(g)
            g.mul_(torch.clamp(s.max_grad_norm / torch.clamp(norm, min=1e-12), max=1.0))
            self.nu.mul_(s.rms_decay).addcmul_(g, g, value=1.0 - s.rms_decay)
            lr = s.learning_rate * (1.0 - min(self.steps, s.total_updates) / s.total_updates)
            self.flat.addcdiv_(g, torch.sqrt(self.nu + s.optimizer_epsilon), value=-lr)
        self.steps += 1
        return loss.detach(), norm

    def load_jax_params(self, params) -> None:
        """Copies the JAX learner's parameters (`network.init`'s tree) into the model: conv
        kernels HWIO -> OIHW, dense kernels [in, out] -> [out, in] (the dense layer's input
        order is the JAX flatten's already)."""
        torso = params["params"]["ImpalaShallowTorso_0"]
        head = params["params"]["PolicyValueHead_0"]
        m = self.model
        pairs = [(m.conv_0, torso["conv_0"]), (m.conv_1, torso["conv_1"]),
                 (m.dense, torso["dense"]), (m.policy, head["policy"]),
                 (m.baseline, head["baseline"])]
        with torch.no_grad():
            for layer, p in pairs:
                k = np.asarray(p["kernel"])
                k = k.transpose(3, 2, 0, 1) if k.ndim == 4 else k.T
                layer.weight.copy_(torch.tensor(k))
                layer.bias.copy_(torch.tensor(np.asarray(p["bias"])))
            for layer, p in ((m.norm_0, torso["norm_0"]), (m.norm_1, torso["norm_1"])):
                layer.weight.copy_(torch.tensor(np.asarray(p["scale"])))
                layer.bias.copy_(torch.tensor(np.asarray(p["bias"])))

    def jax_layout(self) -> dict[str, np.ndarray]:
        """The parameters in the JAX tree's layout, flattened by path (for comparisons)."""
        m = self.model
        out = {}
        for name, layer in (("conv_0", m.conv_0), ("conv_1", m.conv_1), ("dense", m.dense),
                            ("policy", m.policy), ("baseline", m.baseline)):
            w = layer.weight.detach().numpy()
            out[name + "/kernel"] = w.transpose(2, 3, 1, 0) if w.ndim == 4 else w.T
            out[name + "/bias"] = layer.bias.detach().numpy()
        for name, layer in (("norm_0", m.norm_0), ("norm_1", m.norm_1)):
            out[name + "/scale"] = layer.weight.detach().numpy()
            out[name + "/bias"] = layer.bias.detach().numpy()
        return out


def make_batch(s: Settings, seed: int = 0, pseudo_steps: bool = False) -> dict[str, np.ndarray]:
    """A synthetic batch `[B, T(+1), ...]` as `bench_learner_cpu.py` makes it; with
    `pseudo_steps` a few episode ends and pseudo steps (masks 0) too, for comparisons."""
    rng = np.random.default_rng(seed)
    T, B, A = s.unroll_length, s.batch_size, s.num_actions
    batch = dict(obs=rng.integers(0, 256, (B, T + 1) + s.obs_shape, dtype=np.uint8),
                 actions=rng.integers(0, A, (B, T)).astype(np.int32),
                 rewards=rng.normal(size=(B, T)).astype(np.float32),
                 discounts=np.full((B, T), 0.99, np.float32),
                 episode_ends=np.zeros((B, T), bool), masks=np.ones((B, T), np.float32),
                 behaviour_logits=rng.normal(size=(B, T, A)).astype(np.float32))
    if pseudo_steps:
        ends = rng.random((B, T)) < 0.1
        ends[:, -1] = False
        batch["episode_ends"] = ends
        batch["discounts"] = np.where(ends & (rng.random((B, T)) < 0.5), 0.0, 0.99).astype(
            np.float32)  # terminations; the other ends are truncations
        after = np.concatenate([np.zeros((B, 1), bool), ends[:, :-1]], axis=1)
        batch["masks"] = np.where(after, 0.0, 1.0).astype(np.float32)  # envpool's reset step
        batch["discounts"] = np.where(after, 0.0, batch["discounts"]).astype(np.float32)
    return batch


def to_torch(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    out = {k: torch.from_numpy(v) for k, v in batch.items()}
    out["actions"] = out["actions"].long()
    return out


def jax_reference(batch_size: int | None = None, pseudo_steps: bool = True) -> dict:
    """The JAX learner's loss, one update and parameter count on a fixed batch, beside the torch
    learner's from the same initial parameters: {"jax_loss", "torch_loss", "loss_rel_err",
    "update_rel_err" (max |delta torch - delta jax| / max |delta jax| over the parameters after
    one update), "grad_norm" (jax, torch), "params" (jax, torch)}."""
    import jax
    import jax.numpy as jnp

    from agents.impala.builder import make_network
    from agents.impala.config import ImpalaConfig
    from agents.impala.learner import init_state, make_optimizer, make_update
    from agents.impala.losses import impala_loss as jax_loss
    from agents.parallel import sharding
    from agents.run.envs import actor_env_settings, env_info
    from agents.run.flags import config_from_flagfile

    config = config_from_flagfile(ImpalaConfig, CONFIG)
    if batch_size is not None:
        config = dataclasses.replace(config, batch_size=batch_size)
    info = env_info(actor_env_settings(config, 0))
    s = settings_from_config(config, info)
    batch = make_batch(s, seed=1, pseudo_steps=pseudo_steps)
    network = make_network(config, info)
    state = init_state(network, make_optimizer(config), np.zeros(info.obs_shape, np.uint8),
                       jax.random.PRNGKey(0))
    params0 = jax.tree.map(np.asarray, state.params)

    tm = {k: jnp.swapaxes(v, 0, 1) for k, v in batch.items()}
    logits, values = network.apply(state.params, tm["obs"])
    loss, _ = jax_loss(logits[:-1], values, tm["actions"], tm["behaviour_logits"],
                       tm["rewards"], tm["discounts"], tm["episode_ends"], tm["masks"],
                       baseline_cost=config.baseline_cost, entropy_cost=config.entropy_cost,
                       lambda_=config.lambda_, clip_rho_threshold=config.rho_bar,
                       clip_c_threshold=config.c_bar, clip_pg_rho_threshold=config.pg_rho_bar,
                       correction=config.correction, reduction="sum")
    mesh = sharding.learner_mesh(jax.local_devices()[:1])
    update, zero = make_update(network, config, mesh, state.params)
    state = zero.place_state(state, mesh)
    state, metrics = update(state, sharding.put_batch(batch, mesh))
    params1 = jax.tree.map(np.asarray, sharding.local_copy(state.params))

    learner = TorchLearner(s)
    learner.load_jax_params(params0)
    t_batch = to_torch(batch)
    with torch.no_grad():
        torch_loss = float(learner.loss(t_batch))
    _, t_norm = learner.update(t_batch)
    after = learner.jax_layout()

    def flat_jax(params):
        torso = params["params"]["ImpalaShallowTorso_0"]
        head = params["params"]["PolicyValueHead_0"]
        return {f"{layer}/{k}": v for tree in (torso, head) for layer, ps in tree.items()
                for k, v in ps.items()}

    before_j, after_j = flat_jax(params0), flat_jax(params1)
    delta_j = np.concatenate([(after_j[k] - before_j[k]).ravel() for k in sorted(after)])
    delta_t = np.concatenate([(after[k] - before_j[k]).ravel() for k in sorted(after)])
    jax_loss_value = float(loss)
    return dict(
        jax_loss=jax_loss_value, torch_loss=torch_loss,
        loss_rel_err=abs(torch_loss - jax_loss_value) / abs(jax_loss_value),
        update_rel_err=float(np.max(np.abs(delta_t - delta_j)) / np.max(np.abs(delta_j))),
        grad_norm=(float(metrics["grad_norm"]), float(t_norm)),
        params=(sum(x.size for x in jax.tree.leaves(params0)), learner.num_params))


# name -> (TorchLearner options, torch threads or None for torch's default of one a core,
# environment of the worker process). Measured in the module docstring of
# benchmarks/bench_learner_torch.py.
VARIANTS = {
    "default": (dict(), None, {}),
    "channels_last": (dict(channels_last=True), None, {}),
    "compile": (dict(compile=True), None, {}),
    "compile_channels_last": (dict(compile=True, channels_last=True), None, {}),
    "passive_wait": (dict(), None, {"OMP_WAIT_POLICY": "PASSIVE"}),
    "one_thread": (dict(), 1, {}),
    "one_thread_channels_last": (dict(channels_last=True), 1, {}),
    "one_thread_compile": (dict(compile=True), 1, {}),
    "one_thread_compile_channels_last": (dict(compile=True, channels_last=True), 1, {}),
}
BEST = "one_thread_compile"  # the fastest on the shared 2-core host (bench_learner_torch.py)


def make_learner(s: Settings, variant: str = BEST) -> TorchLearner:
    """The learner under `variant`'s options; its environment must be set before torch
    starts its thread pools (see `variant_env`)."""
    options, threads, _ = VARIANTS[variant]
    if threads is not None:
        torch.set_num_threads(threads)
    return TorchLearner(s, **options)


def variant_env(variant: str) -> dict[str, str]:
    """The environment of a process that runs `variant`."""
    return dict(os.environ, **VARIANTS[variant][2])


def time_updates(learner: TorchLearner, batch: dict[str, np.ndarray], seconds: float,
                 warmup: int = 3) -> list[float]:
    """Seconds of each update for `seconds` after `warmup` updates; a fresh tensor view of the
    host batch each update, as the JAX learner puts a fresh batch on its device."""
    for _ in range(warmup):
        learner.update(to_torch(batch))
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 3:
        start = time.perf_counter()
        learner.update(to_torch(batch))
        times.append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--check", action="store_true",
                        help="compare the loss and one update with the JAX learner's")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    s = Settings()
    if args.child:
        start = time.perf_counter()
        learner = make_learner(s, args.child)
        batch = make_batch(s)
        learner.update(to_torch(batch))  # compiles, for the compiled variants
        setup = time.perf_counter() - start
        times = time_updates(learner, batch, args.seconds)
        print(json.dumps(dict(ms=1e3 * statistics.median(times), updates=len(times),
                              setup_s=setup)))
        return
    if args.check:
        r = jax_reference()
        print(json.dumps(r))
        print(f"parameters: jax {r['params'][0]:,}, torch {r['params'][1]:,}")
        assert r["params"][0] == r["params"][1], r["params"]
        return
    names = args.variants.split(",")
    results = {n: [] for n in names}
    for _ in range(args.rounds):
        for name in names:
            out = subprocess.run([sys.executable, __file__, "--child", name, "--seconds",
                                  str(args.seconds)], capture_output=True, text=True,
                                 env=variant_env(name))
            r = (json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0
                 else {"error": (out.stderr.strip().splitlines() or ["?"])[-1]})
            print(name, r, flush=True)
            results[name].append(r)
    base = statistics.median(r["ms"] for r in results[names[0]] if "ms" in r)
    for name in names:
        ok = [r["ms"] for r in results[name] if "ms" in r]
        if ok:
            print(f"{name:24s} {statistics.median(ok):8.1f} ms/update  "
                  f"{base / statistics.median(ok):5.2f}x {names[0]}")


if __name__ == "__main__":
    main()

"""Checkpoints of an Ape-X Atari run: ours (agents/run/checkpoint.py) against orbax-checkpoint.

What is checkpointed: a full Ape-X Atari replay of `--transitions` transitions (PrioritizedReplay
with FrameStackStorage, built by agents.apex.replay.make_replay: stacks uint8 [4, 84, 84],
stack_axis=0) plus the learner state of the default ApexConfig, shaped like
agents.apex.learner.init_state's (the Nature-DQN torso with dueling heads of make_network:
params, target params, centered-RMSProp state of the flat params, the step counter) and a
meta.json-like dict (counters and the config).

Data. Frames are real game frames: `--frames` (default Pong-v5) records 16 envpool envs for 512
steps with random actions; `--frames noise` uses uniform random frames instead, which no
compressor can shrink (the worst case for orbax's zstd). The replay is filled to 110% of its
capacity (so the frame ring has wrapped, the steady state) from 64 env streams, 8 streams x 32
steps per add batch (bench_replay.AtariStreams: frames change every step, consecutive stacks share
3 of 4 frames), with exponential |TD|-like priorities. The learner's arrays hold random values
(fresh target params are copies and fresh RMSProp moments constants, which would compress
unrealistically well).

Formats (each saves the same learner, meta and replay contents):
  current     agents.run.checkpoint.save_checkpoint / find_resumable + restore_checkpoint: msgpack
              learner, replay.npz written from the live arrays under the replay's lock, a
              SHA-256 manifest; restore verifies every checksum (what a resume does).
  orbax       orbax CheckpointManager with its defaults: async save then wait_until_finished
              (the replay's lock held only while save() blocks), host arrays deep-copied before
              the background write, zstd compression, OCDBT.
  orbax-lean  CheckpointManager, synchronous save under the replay's lock, NumpyHandler with
              deepcopy_host_arrays=False (no second copy of the replay), zstd kept.
  orbax-raw   orbax-lean without compression (the same bytes as the .npz, stored by tensorstore).
With orbax the replay's arrays are one PyTree item (keys split at "/" into nested dicts), the
learner state another, and the replay's sampler state (a JSON string, which tensorstore cannot
store as an array) goes with the meta into a JSON item: nothing is pickled by either format.

Measured, every operation in a fresh subprocess (so memory peaks and allocator state never mix):
  save s          until the checkpoint is complete (orbax async: until wait_until_finished)
  blocking s      until save() returns, when training could go on (differs for async only)
  fsync s         fsync of every file written, after the save: our format does not fsync,
                  tensorstore does, so save + fsync is the like-for-like durable save time
  save dRSS       peak resident memory during the save minus the resident memory just before
  restore s       into a fresh learner template and an empty replay, load_state_dict included;
                  the files are dropped from the page cache first (fsync, then
                  POSIX_FADV_DONTNEED), so restores read the disk as after a reboot
  checksums s     the part of `restore s` spent verifying SHA-256 (ours only; orbax has none)
  restore dRSS    peak during the restore minus before; it includes the restored replay itself,
                  `kept` is what is still resident after the restore (peak - kept: transient)
  disk GiB        bytes of all files of the checkpoint
  exact           the restored learner, replay storage, counters and next sample (ids, weights,
                  frames) equal the saved ones, by SHA-256
Peaks: the kernel's high-water mark VmHWM, reset just before the operation by writing 5 to
/proc/self/clear_refs (falls back to ru_maxrss, an upper bound, where that is not allowed).
Repeats run the formats in alternation, so they see the same load on a shared machine; figures
are medians. Ratios are orbax variant / current (below 1: orbax is faster or smaller).

    .venv/bin/python benchmarks/bench_checkpoint.py [--transitions 1000000] [--repeats 1]
        [--formats current,orbax,orbax-lean,orbax-raw] [--frames Pong-v5|noise] [--dir DIR]
"""

import argparse
import dataclasses
import gc
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

import timing

from bench_replay import AtariStreams

FORMATS = ("current", "orbax", "orbax-lean", "orbax-raw")
GiB = 2**30
STEP = 123_456  # learner updates of the checkpointed run; also the checkpoint's step
POOL_ENVS, POOL_STEPS = 16, 512
ADD_BATCH = 256
SAMPLE_CHECK = 256  # transitions sampled after save and after restore to compare
WORKER_TIMEOUT_S = 3 * 3600


# ---------------------------------------------------------------------------------------------
# Memory measurement


def _rss() -> int:
    return psutil.Process().memory_info().rss


def _reset_peak() -> bool:
    """Resets the kernel's resident high-water mark of this process (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemory:
    """Resident memory just before a block, its peak during it, and what stays after it."""

    def __enter__(self):
        gc.collect()
        self.before = _rss()
        self.reset = _reset_peak()
        return self

    def __exit__(self, *exc):
        self.peak = max(_peak_rss(), self.before)
        self.after = _rss()
        return False


# ---------------------------------------------------------------------------------------------
# The run being checkpointed


def record_pool(frames: str) -> tuple[np.ndarray, int]:
    """(uint8 frames [P, 84, 84], num_actions): envs' frames one trajectory after another, so
    consecutive pool entries are consecutive game frames; or noise."""
    if frames == "noise":
        return np.random.default_rng(0).integers(0, 256, (4096, 84, 84), np.uint8), 18
    from agents.run.envs import EnvSettings, env_info, make_env
    settings = EnvSettings(frames, num_envs=POOL_ENVS, batch_size=POOL_ENVS, seed=0,
                           episodic_life=False, reward_clip=False)
    if not settings.is_atari:
        raise SystemExit(f"--frames {frames}: not an Atari game (or noise)")
    env, num_actions = make_env(settings), env_info(settings).num_actions
    env.reset()
    rng = np.random.default_rng(0)
    newest = []
    for _ in range(POOL_STEPS):
        obs = env.step(rng.integers(0, num_actions, POOL_ENVS))[0]
        newest.append(obs[:, -1])  # the newest frame of each env's stack
    env.close()
    return np.ascontiguousarray(np.stack(newest, 1).reshape(-1, 84, 84)), num_actions


def make_run(transitions: int, num_actions: int, learner_seed: int):
    """(config, learner state, empty replay) of an Ape-X Atari run with default settings."""
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from agents.apex.builder import make_network
    from agents.apex.replay import make_replay
    from agents.apex.config import ApexConfig
    from agents.apex.learner import TrainingState, make_optimizer
    from agents.run.envs import EnvInfo

    config = ApexConfig(replay_capacity=transitions,
                        min_replay_size=min(transitions, ApexConfig.min_replay_size))
    info = EnvInfo(obs_shape=(4, 84, 84), obs_dtype=np.dtype(np.uint8),
                   num_actions=num_actions, is_atari=True, channels_first=True,
                   max_episode_steps=27_000)
    network, optimizer = make_network(config, info), make_optimizer(config)
    # The shapes of learner.init_state's tree, traced without running: initializing the network
    # eagerly compiles dozens of small XLA programs (20-40 s per process on a busy machine).
    params = jax.eval_shape(network.init, jax.random.key(0),
                            jax.ShapeDtypeStruct((1,) + info.obs_shape, np.uint8))
    opt_state = jax.eval_shape(lambda p: optimizer.init(ravel_pytree(p)[0]), params)
    # Random values as in a trained run (fresh target params are copies and fresh RMSProp
    # moments constants, which would compress far better than a real checkpoint): params as
    # device arrays, the optimizer state on the host as learner.init_state leaves them.
    rng = np.random.default_rng(learner_seed)

    def values(shape):
        if not np.issubdtype(shape.dtype, np.floating):
            return np.zeros(shape.shape, shape.dtype)
        return np.abs(rng.normal(0, 0.01, shape.shape)).astype(shape.dtype)
    state = TrainingState(params=jax.tree.map(lambda x: jnp.asarray(values(x)), params),
                          target_params=jax.tree.map(lambda x: jnp.asarray(values(x)), params),
                          opt_state=jax.tree.map(values, opt_state),
                          steps=jnp.asarray(STEP, jnp.int32))
    return config, state, make_replay(config, info)


def fill(replay, pool: np.ndarray, transitions: int) -> None:
    """Adds 110% of capacity, so the frame ring has wrapped (the steady state of a run)."""
    data = AtariStreams(ADD_BATCH, pool=1)
    data.pool = pool
    rng = np.random.default_rng(1)
    batches = -(-transitions * 11 // (10 * ADD_BATCH))
    start = time.perf_counter()
    for b in range(batches):
        fields, streams = data.batch(b)
        replay.add(fields, rng.exponential(1.0, ADD_BATCH), streams=streams)
        if b % 1000 == 999:
            print(f"    filled {(b + 1) * ADD_BATCH:,} / {batches * ADD_BATCH:,} "
                  f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)


def fingerprints(learner, replay) -> dict[str, str]:
    """SHA-256 of the learner, the replay's contents and counters, and of its next sample
    (which also depends on the sum tree, the slot ids and the sampler's state)."""
    import jax
    contents = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(learner)):
        contents.update(np.ascontiguousarray(leaf).tobytes())
    storage = replay.storage.state_dict()  # the live arrays, no copy
    for key in sorted(storage):
        contents.update(key.encode())
        contents.update(np.ascontiguousarray(storage[key]))
    contents.update(json.dumps([replay.stats(), replay.priority_mass(), replay.beta]).encode())
    sample = replay.sample(SAMPLE_CHECK)
    drawn = hashlib.sha256()
    for array in (sample.ids, sample.weights, *(sample.transitions[k]
                                                 for k in sorted(sample.transitions))):
        drawn.update(np.ascontiguousarray(array))
    return dict(contents=contents.hexdigest(), sample=drawn.hexdigest())


# ---------------------------------------------------------------------------------------------
# The formats


def _nest(flat: dict) -> dict:
    """{"a/b": x} -> {"a": {"b": x}}: orbax names files after the keys, so "/" must go."""
    tree = {}
    for key, value in flat.items():
        *parents, leaf = key.split("/")
        node = tree
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = np.asarray(value)  # scalars as 0-d arrays; arrays are not copied
    return tree


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _orbax_manager(directory: str, fmt: str):
    import jax
    import orbax.checkpoint as ocp
    if fmt == "orbax":
        return ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=2))
    th = ocp.type_handlers
    # Only the replay item gets the registry: its arrays are written straight from the live
    # replay, as PrioritizedReplay.save does, instead of deep-copying gigabytes first.
    registry = th.create_type_handler_registry(
        (np.ndarray, th.NumpyHandler(deepcopy_host_arrays=False)),
        (np.number, th.ScalarHandler()),
        (jax.Array, th.get_type_handler(jax.Array)))  # unused here; orbax warns without it
    handlers = dict(learner=ocp.StandardCheckpointHandler(),
                    replay=ocp.PyTreeCheckpointHandler(type_handler_registry=registry,
                                                       use_compression=fmt != "orbax-raw"),
                    meta=ocp.JsonCheckpointHandler())
    return ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(max_to_keep=2,
                                                        enable_async_checkpointing=False),
        item_handlers=handlers)


def save(fmt: str, directory: str, learner, meta: dict, replay) -> tuple[float, float]:
    """Saves a checkpoint; returns (seconds until complete, seconds until training could go
    on: the replay's lock released and save() returned)."""
    if fmt == "current":
        from agents.run import checkpoint
        start = time.perf_counter()
        checkpoint.save_checkpoint(directory, STEP, learner, meta, replay)
        seconds = time.perf_counter() - start
        return seconds, seconds
    import orbax.checkpoint as ocp
    manager = _orbax_manager(directory, fmt)  # made once at the start of a run: not timed
    item = ocp.args.StandardSave if fmt == "orbax" else ocp.args.PyTreeSave
    start = time.perf_counter()
    # The replay's lock and live arrays (what state_dict() copies): adds must not change the
    # arrays while they are read, as in PrioritizedReplay.save.
    with replay._lock:
        live = replay._live_state()
        manager.save(STEP, args=ocp.args.Composite(
            learner=ocp.args.StandardSave(learner),
            replay=item(_nest({k: v for k, v in live.items() if k != "rng"})),
            meta=ocp.args.JsonSave(dict(meta=meta, replay_rng=str(live["rng"])))))
        if fmt != "orbax":  # synchronous: the arrays are read until the save is complete
            manager.wait_until_finished()
    blocking = time.perf_counter() - start
    manager.wait_until_finished()  # async: the background write, after the lock is released
    seconds = time.perf_counter() - start
    manager.close()
    return seconds, blocking


def restore(fmt: str, directory: str, template, replay) -> tuple[object, dict, float]:
    """Restores the newest checkpoint; returns (learner, meta, seconds verifying checksums)."""
    if fmt == "current":
        from agents.run import checkpoint
        start = time.perf_counter()
        path = checkpoint.find_resumable(directory)  # SHA-256 of every file, as a resume does
        checks = time.perf_counter() - start
        learner, meta = checkpoint.restore_checkpoint(path, template, replay, verified=True)
        return learner, meta, checks
    import orbax.checkpoint as ocp
    manager = _orbax_manager(directory, fmt)
    item = ocp.args.StandardRestore if fmt == "orbax" else ocp.args.PyTreeRestore
    restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
        learner=ocp.args.StandardRestore(template), replay=item(), meta=ocp.args.JsonRestore()))
    manager.close()
    state = _flatten(dict(restored["replay"]))
    state["rng"] = np.array(restored["meta"]["replay_rng"])
    replay.load_state_dict(state)
    return restored["learner"], restored["meta"]["meta"], 0.0


# ---------------------------------------------------------------------------------------------
# Workers (one operation each, in a fresh process)


def _files(directory: str) -> list[str]:
    return [os.path.join(root, name) for root, _, names in os.walk(directory) for name in names]


def _sync_and_evict(directory: str) -> float:
    """fsyncs every file and folder (seconds), then drops the files from the page cache."""
    start = time.perf_counter()
    for path in _files(directory) + [root for root, _, _ in os.walk(directory)]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    seconds = time.perf_counter() - start
    for path in _files(directory):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return seconds


def _quiet() -> None:
    # If memory runs out, the kernel kills this worker rather than anything else on the machine.
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from absl import logging
    logging.set_verbosity(logging.WARNING)


def worker_save(args) -> dict:
    _quiet()
    with np.load(args.pool, allow_pickle=False) as data:
        pool, num_actions = data["frames"], int(data["num_actions"])
    config, learner, replay = make_run(args.transitions, num_actions, learner_seed=0)
    fill(replay, pool, args.transitions)
    del pool
    meta = dict(counters=dict(actor_steps=2 * STEP * 50, episodes=STEP // 7, learner_updates=STEP),
                config=dataclasses.asdict(config), updates=STEP)
    with PeakMemory() as memory:
        seconds, blocking = save(args.worker_format, args.dir, learner, meta, replay)
    fsync = _sync_and_evict(args.dir)
    files = _files(args.dir)
    return dict(save_s=seconds, blocking_s=blocking, fsync_s=fsync,
                save_rss=memory.peak - memory.before, peak_reset=memory.reset,
                disk=sum(os.path.getsize(p) for p in files), files=len(files),
                replay_resident=memory.before, **fingerprints(learner, replay))


def worker_restore(args) -> dict:
    _quiet()
    with np.load(args.pool, allow_pickle=False) as data:
        num_actions = int(data["num_actions"])
    # Another seed: a restore that left the template as it was would not pass as exact.
    _, template, replay = make_run(args.transitions, num_actions, learner_seed=1)
    with PeakMemory() as memory:
        start = time.perf_counter()
        learner, meta, checks = restore(args.worker_format, args.dir, template, replay)
        seconds = time.perf_counter() - start
    return dict(restore_s=seconds, checksums_s=checks, restore_rss=memory.peak - memory.before,
                kept_rss=memory.after - memory.before, peak_reset=memory.reset,
                meta_ok=meta.get("updates") == STEP, **fingerprints(learner, replay))


def run_worker(operation: str, fmt: str, directory: str, pool: str, transitions: int) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--worker", operation,
               "--worker_format", fmt, "--dir", directory, "--pool", pool,
               "--transitions", str(transitions)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False,
                          timeout=WORKER_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{operation} worker of {fmt} failed (exit code {done.returncode}; "
                           "-9 is usually the kernel's out-of-memory killer)")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Driver


def _roomiest_folder(candidates: list[str]) -> str:
    existing = [c for c in candidates if os.path.isdir(c)]
    return max(existing, key=lambda c: shutil.disk_usage(c).free)


def _available_memory() -> int:
    return psutil.virtual_memory().available


def measure(args, work: str, pool: str, replay_bytes: int) -> dict[str, list[dict]]:
    results = {fmt: [] for fmt in args.formats}
    # Saving holds the replay plus, for orbax's default deep copy, a second one; restoring
    # holds the file's arrays and the replay they are loaded into.
    need = 2.2 * replay_bytes + GiB
    for repeat in range(args.repeats):
        for fmt in args.formats:  # in alternation, so each sees the same machine load
            directory = os.path.join(work, f"{fmt}-{repeat}")
            if _available_memory() < need:
                print(f"  warning: {_available_memory() / GiB:.1f} GiB available, about "
                      f"{need / GiB:.1f} GiB needed; the worker may be killed", file=sys.stderr)
            try:
                print(f"  {fmt} (round {repeat + 1}/{args.repeats}): fill and save",
                      file=sys.stderr, flush=True)
                saved = run_worker("save", fmt, directory, pool, args.transitions)
                print(f"  {fmt}: restore", file=sys.stderr, flush=True)
                restored = run_worker("restore", fmt, directory, pool, args.transitions)
            finally:
                shutil.rmtree(directory, ignore_errors=True)  # gigabytes: one format at a time
            exact = (saved["contents"] == restored["contents"] and saved["sample"] ==
                     restored["sample"] and restored["meta_ok"])
            restored["peak_reset"] = saved["peak_reset"] and restored["peak_reset"]
            results[fmt].append(dict(saved, **restored, exact=exact))
    return results


def report(results: dict[str, list[dict]], args, replay_bytes: int, learner_bytes: int) -> None:
    for rounds in results.values():
        for r in rounds:
            r["durable_s"] = r["save_s"] + r["fsync_s"]
    keys = ("save_s", "blocking_s", "fsync_s", "durable_s", "save_rss", "restore_s",
            "checksums_s", "restore_rss", "kept_rss", "disk", "files")
    med = {fmt: {k: statistics.median(r[k] for r in rounds) for k in keys}
           for fmt, rounds in results.items()}
    print(f"Checkpoint of {args.transitions:,} Atari transitions ({args.frames} frames; replay "
          f"{replay_bytes / GiB:.2f} GiB resident) + learner state {learner_bytes / 2**20:.1f} "
          f"MiB; medians of {args.repeats}, each operation in a fresh process:")
    timing.print_table(
        ["format", "save s", "blocking s", "fsync s", "save+fsync s", "save dRSS GiB",
         "restore s", "checksums s", "restore dRSS GiB", "kept GiB", "disk GiB", "files",
         "exact"],
        [[fmt, m["save_s"], m["blocking_s"], m["fsync_s"], m["durable_s"], m["save_rss"] / GiB,
          m["restore_s"], m["checksums_s"], m["restore_rss"] / GiB, m["kept_rss"] / GiB,
          m["disk"] / GiB, m["files"], str(all(r["exact"] for r in results[fmt]))]
         for fmt, m in med.items()])
    if args.repeats > 1:  # the spread, on a machine shared with other work
        print("Each round (rounds alternate the formats):")
        timing.print_table(
            ["format", "round", "save s", "blocking s", "save+fsync s", "save dRSS GiB",
             "restore s", "restore dRSS GiB"],
            [[fmt, i + 1, r["save_s"], r["blocking_s"], r["durable_s"], r["save_rss"] / GiB,
              r["restore_s"], r["restore_rss"] / GiB]
             for fmt, rounds in results.items() for i, r in enumerate(rounds)])
    base = med.get("current")
    others = [fmt for fmt in med if fmt != "current"]
    if base and others:
        def ratio(fmt, key):
            return med[fmt][key] / base[key] if base[key] > 0 else float("nan")
        print("Ratios orbax / current (below 1: orbax faster or smaller):")
        timing.print_table(
            ["format", "save", "blocking", "save+fsync", "save dRSS", "restore", "restore dRSS",
             "disk"],
            [[fmt] + [ratio(fmt, k) for k in ("save_s", "blocking_s", "durable_s", "save_rss",
                                              "restore_s", "restore_rss", "disk")]
             for fmt in others])
    if not all(r["peak_reset"] for rounds in results.values() for r in rounds):
        print("note: /proc/self/clear_refs was not writable; peaks are ru_maxrss (upper bounds)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=1_000_000,
                        help="replay capacity, filled to 110%%")
    parser.add_argument("--repeats", type=int, default=1,
                        help="save + restore rounds per format (each refills the replay)")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--frames", default="Pong-v5",
                        help="an envpool Atari game to record frames from, or noise")
    parser.add_argument("--dir", default=None,
                        help="where the checkpoints are written (default: the temporary or "
                             "home folder with the most free space); removed afterwards")
    parser.add_argument("--worker", choices=("save", "restore"), help=argparse.SUPPRESS)
    parser.add_argument("--worker_format", choices=FORMATS, help=argparse.SUPPRESS)
    parser.add_argument("--pool", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = (worker_save if args.worker == "save" else worker_restore)(args)
        print(json.dumps(result), flush=True)
        return
    args.formats = args.formats.split(",")
    unknown = sorted(set(args.formats) - set(FORMATS))
    if unknown:
        parser.error(f"unknown formats {unknown}; choose from {list(FORMATS)}")
    if any(f.startswith("orbax") for f in args.formats):
        from importlib.metadata import version

        import orbax.checkpoint  # noqa: F401  (fails here, not in a worker, when missing)
        print(f"orbax-checkpoint {version('orbax-checkpoint')}", file=sys.stderr)

    from replay.frames import FrameStackStorage
    frame_capacity = FrameStackStorage(dict(obs=((4, 84, 84), np.uint8),
                                            next_obs=((4, 84, 84), np.uint8)),
                                       args.transitions, stack_axis=0).frame_capacity
    # Per transition: slot seqs 64 B, ids 8, sum tree 16, action + reward + discount 12.
    replay_bytes = frame_capacity * 84 * 84 + args.transitions * (64 + 8 + 16 + 12)
    base = args.dir or _roomiest_folder([tempfile.gettempdir(), os.path.expanduser("~")])
    free = shutil.disk_usage(base).free
    if free < 1.2 * replay_bytes + GiB:
        raise SystemExit(f"{base} has {free / GiB:.1f} GiB free; a checkpoint of "
                         f"{args.transitions:,} transitions needs about "
                         f"{(1.2 * replay_bytes + GiB) / GiB:.1f} GiB")
    work = tempfile.mkdtemp(prefix="bench_checkpoint_", dir=base)
    print(f"checkpoints under {work} ({free / GiB:.0f} GiB free); "
          f"{_available_memory() / GiB:.1f} GiB memory available", file=sys.stderr)
    try:
        frames, num_actions = record_pool(args.frames)
        pool = os.path.join(work, "pool.npz")
        np.savez(pool, frames=frames, num_actions=np.int64(num_actions))
        import jax
        _, learner, _ = make_run(1024, num_actions, learner_seed=0)
        learner_bytes = sum(np.asarray(x).nbytes for x in jax.tree.leaves(learner))
        results = measure(args, work, pool, replay_bytes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results, args, replay_bytes, learner_bytes)


if __name__ == "__main__":
    main()

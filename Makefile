# Two commands: `make lab` opens the lab, `make test` runs every test. Each sets up .venv first.
# `make lab` opens the student's own copies (my-labs/, outputs cleared, never overwritten);
# `make instructor` opens the solved notebooks in labs/ with their stored outputs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8888

# Jupyter, IPython and matplotlib write into the home directory unless told otherwise.
export JUPYTER_CONFIG_DIR := $(CURDIR)/$(VENV)/jupyter/config
export JUPYTER_DATA_DIR   := $(CURDIR)/$(VENV)/jupyter/data
export JUPYTER_RUNTIME_DIR:= $(CURDIR)/$(VENV)/jupyter/runtime
export IPYTHONDIR         := $(CURDIR)/$(VENV)/ipython
export MPLCONFIGDIR       := $(CURDIR)/$(VENV)/matplotlib
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# torch's OpenMP threads sleep instead of spinning while they wait: on 2 shared cores (a kernel,
# gloo ranks, a browser) spinning threads starve each other; the numbers do not change.
export OMP_WAIT_POLICY := PASSIVE

.PHONY: lab instructor serve test quick portability notebooks bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[test,hf]"
	touch $(STAMP)

lab: $(STAMP)
	@$(BIN)/python -m labkit.course update --dst my-labs
	@$(MAKE) -s serve DIR=my-labs

instructor: $(STAMP)
	@$(MAKE) -s serve DIR=labs

DIR ?= my-labs
serve:
	@token=$${LABKIT_TOKEN:-$$($(BIN)/python -c 'import secrets; print(secrets.token_hex(16))')}; \
	echo "labkit: open http://$(HOST):$(PORT)/lab?token=$$token"; \
	$(BIN)/jupyter lab --notebook-dir=$(DIR) --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
	  --no-browser --allow-root --IdentityProvider.token=$$token

test: $(STAMP)
	$(BIN)/python -m pytest --nbval -q

# The quick tier: every test but real processes, notebooks and the browser (docs/architecture.md).
quick: $(STAMP)
	$(BIN)/python -m pytest tests -q -m "not procs and not notebook and not browser"

# Every notebook's strict nbval under each of another machine's settings (tests/portable_settings.py):
# the checked outputs must not change with the CPU's kernels or the thread count. `make test` runs each
# notebook under one of them already.
portability: $(STAMP)
	LABKIT_PORTABILITY=all $(BIN)/python -m pytest tests/test_portable_outputs.py -q

notebooks: $(STAMP)
	$(BIN)/python tools/build_notebooks.py $(ONLY)

bench: $(STAMP)
	$(BIN)/labkit bench --notebooks

lint: $(STAMP)
	$(BIN)/ruff check labkit tests tools instructor

clean:
	rm -rf $(VENV)

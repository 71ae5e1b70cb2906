# Two commands: `make lab` opens the lab, `make test` runs every test. Each sets up .venv first.
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

.PHONY: lab test notebooks bench lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
	touch $(STAMP)

lab: $(STAMP)
	@token=$${LABKIT_TOKEN:-$$($(BIN)/python -c 'import secrets; print(secrets.token_hex(16))')}; \
	echo "labkit: open http://$(HOST):$(PORT)/lab?token=$$token"; \
	$(BIN)/jupyter lab --notebook-dir=labs --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
	  --no-browser --allow-root --IdentityProvider.token=$$token

test: $(STAMP)
	$(BIN)/python -m pytest --nbval -q

notebooks: $(STAMP)
	$(BIN)/python tools/build_notebooks.py $(ONLY)

bench: $(STAMP)
	$(BIN)/labkit bench --notebooks

lint: $(STAMP)
	$(BIN)/ruff check labkit tests tools

clean:
	rm -rf $(VENV)

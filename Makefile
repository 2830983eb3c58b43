# The two commands of the README: `make demo` and `make test`.
# Both create .venv if it is missing and install Tether with its dev tools from this checkout.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tether demo $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

check: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/drain.py

clean:
	rm -rf $(VENV) build *.egg-info

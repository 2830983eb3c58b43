# The two commands of the README: `make demo` and `make test` (plus check, docs and bench).
# Both create .venv if it is missing and install Tether with its dev tools from this checkout.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check docs bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# setuptools adds a notice to every editable install of a package whose folder is renamed
# (pyproject.toml: package-dir tether = src): "Editable installation. Please be careful with folders
# in your working directory with the same name as your package", which pip prints as a
# BuildBackendWarning. Such an install imports through a finder that a ./tether folder would shadow;
# this checkout has none (tests/unit/test_packaging.py checks), so on a first `make demo` the notice
# is noise. Only it is silenced: any other warning still shows.
EDITABLE_NOTICE := ignore:Editable installation:UserWarning

$(STAMP): pyproject.toml | $(BIN)/python
	PYTHONWARNINGS='$(EDITABLE_NOTICE)'"$${PYTHONWARNINGS:+,$$PYTHONWARNINGS}" $(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tether demo $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

check: $(STAMP) docs
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into build/site, which git ignores. --strict turns every
# warning (a broken link or anchor, a page missing from the nav) into a failure; a missing snippet
# fails too. No --quiet: it drops warnings before --strict counts them, and the build would pass.
# NO_MKDOCS_2_WARNING silences only Material's banner about its successor.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

bench: $(STAMP)
	$(BIN)/python bench/drain.py

clean:
	rm -rf $(VENV) build *.egg-info

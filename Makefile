# The two commands of README.rst:  make demo  (train on digits fed by a Queue)
#                                   make test  (the test suite)
# Both install what they need on a fresh Debian bookworm machine first.
VENV        ?= .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
EXT         := build/engine.stamp
ENGINE_SRC  := $(wildcard c_code/engine/*/tq_*.c c_code/engine/*/tq_*.h c_code/python/tq_*.c c_code/python/tq_*.h \
               c_code/generated/*.h) c_code/sources.txt setup.py
# The PyTensor venv (numpy 2) gets its own copy of the package, engine built
# against its numpy, installed from a wheel: the in-place engine stays the
# Theano venv's (numpy 1.23.5).  Its tests run with PYTHONSAFEPATH=1, so that
# the installed copy, not the checkout's, is the one imported.
PT_VENV     ?= .venv-pytensor
PT_PY       := $(PT_VENV)/bin/python
PT_STAMP    := $(PT_VENV)/.installed
PT_PACKAGE  := $(PT_VENV)/.theano_queue
# The PyMC venv: PyMC 5.28.5 with the PyTensor it pins (2.38.x), so that the
# PyTensor suite runs on both PyTensor lines; its package the same way.
PM_VENV     ?= .venv-pymc
PM_PY       := $(PM_VENV)/bin/python
PM_STAMP    := $(PM_VENV)/.installed
PM_PACKAGE  := $(PM_VENV)/.theano_queue
PACKAGE_SRC := $(wildcard theano_queue/*.py theano_queue/*/*.py c_code/*/*.c c_code/*/*.h c_code/*/*/*.c c_code/*/*/*.h \
               c_code/sources.txt) setup.py
# The venv's own Theano defaults (scripts/install-deps.sh) make THEANO_FLAGS optional.

# What `make lint` checks for style (c_code/generated/ is made by scripts/gen_ptx.sh); .clang-format is clang-format 14's, Debian
# bookworm's (scripts/install-deps.sh installs it).
C_STYLED    := $(filter-out c_code/generated/%,$(wildcard c_code/*/*.c c_code/*/*.h c_code/*/*/*.c c_code/*/*/*.h \
               c_code/*/*/*.cu tests/c/*.c tests/c/*.h))
CLANG_FORMAT ?= clang-format

.PHONY: test test-pytensor test-pymc lint format demo bench doc wheel deps pytensor-deps pymc-deps clean
# Style and types: ruff (ruff.toml), clang-format (.clang-format), mypy (setup.cfg, theano_queue/_engine.pyi).
LINT = $(PY) -m ruff check . && $(PY) -m ruff format --check . && $(CLANG_FORMAT) --dry-run -Werror $(C_STYLED) \
       && $(PY) -m mypy --cache-dir build/mypy
# The PyTensor suite (tests/pytensor, its own pytest.ini), run by one venv's
# python ($(1)): .venv-pytensor's (PyTensor 3.0) and .venv-pymc's (2.38);
# PYTENSOR_TESTS=tests/pytensor/test_ops.py runs one file.
PYTENSOR_TESTS ?= tests/pytensor
pytensor_pytest = PYTHONSAFEPATH=1 $(1) -m pytest -c tests/pytensor/pytest.ini $(PYTEST_ARGS) $(PYTENSOR_TESTS)

# The release's files: an sdist and the wheel built from it (python -m build, in
# an isolated environment with numpy 2's headers, whatever build/ holds), in
# build/dist/, checked to hold c_code/ and the engine's stub: a release is
# `twine upload build/dist/*` away.
RELEASE = rm -rf build/dist && $(PY) -m build --outdir build/dist . && $(PY) scripts/check_wheel.py build/dist
# Each suite's skips (tests/support/skip_report.py), listed together at the end of make test.
SKIPS       := build/skips.jsonl

# Every step runs whatever the ones before it say (a failed test must not hide a
# broken doc or the other suite); the target still fails when any of them did.
# It ends by listing every suite's skips by reason, so that a new one is seen.
test: $(EXT) $(PT_PACKAGE) $(PM_PACKAGE)
	@status=0; mkdir -p build && rm -f $(SKIPS); export TQ_SKIPS_FILE="$(CURDIR)/$(SKIPS)"; \
	$(LINT) || status=1; \
	$(PY) -m pytest $(PYTEST_ARGS) || status=1; \
	$(PY) -m sphinx -q -b doctest doc doc/_build/doctest || status=1; \
	$(PY) -m sphinx -q -n -W --keep-going -b html doc doc/_build/html || status=1; \
	$(call pytensor_pytest,$(PT_PY)) || status=1; \
	$(call pytensor_pytest,$(PM_PY)) || status=1; \
	$(RELEASE) || status=1; \
	$(PY) tests/support/skip_report.py $(SKIPS) || status=1; \
	exit $$status

test-pytensor: $(PT_PACKAGE)
	$(call pytensor_pytest,$(PT_PY))

test-pymc: $(PM_PACKAGE)
	$(call pytensor_pytest,$(PM_PY))

lint: $(STAMP)
	$(LINT)

# Rewrites the tree in that style.
format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .
	$(CLANG_FORMAT) -i $(C_STYLED)

demo: $(EXT)
	$(PY) examples/train_digits.py $(DEMO_ARGS)

# Through the command, which refuses at once where Theano is not on a GPU
# rather than replace the figures of record in doc/ (BENCH_ARGS='--out PATH'
# writes elsewhere).
bench: $(EXT)
	$(PY) -m theano_queue bench $(BENCH_ARGS)

doc: $(EXT)
	$(PY) -m sphinx -q -b html doc doc/_build/html

wheel: $(STAMP)
	$(RELEASE)

deps: $(STAMP)

$(STAMP): setup.py scripts/install-deps.sh
	bash scripts/install-deps.sh $(VENV)
	touch $@

pytensor-deps: $(PT_STAMP)

$(PT_STAMP): scripts/install-pytensor.sh
	bash scripts/install-pytensor.sh $(PT_VENV)
	touch $@

pymc-deps: $(PM_STAMP)

$(PM_STAMP): scripts/install-pymc.sh scripts/install-pytensor.sh
	bash scripts/install-pymc.sh $(PM_VENV)
	touch $@

# The package as a wheel built by a numpy-2 venv ($(1): its python) in
# build/$(2)/, so that no object file is shared with the in-place build (numpy
# 1.23.5) or with the other venv's.
define install_wheel
	rm -rf build/$(2) && mkdir -p build/$(2)
	$(1) -W ignore setup.py -q egg_info --egg-base build/$(2) build --build-base build/$(2) \
	  bdist_wheel --bdist-dir build/$(2)/bdist --dist-dir build/$(2)/dist
	$(1) -m pip install -q --no-deps --force-reinstall build/$(2)/dist/theano_queue-*.whl
endef

$(PT_PACKAGE): $(PT_STAMP) $(PACKAGE_SRC)
	$(call install_wheel,$(PT_PY),pytensor)
	touch $@

$(PM_PACKAGE): $(PM_STAMP) $(PACKAGE_SRC)
	$(call install_wheel,$(PM_PY),pymc)
	touch $@

# The engine extension, rebuilt when its sources change.
$(EXT): $(STAMP) $(ENGINE_SRC)
	$(PY) setup.py -q build_ext --inplace
	mkdir -p build && touch $@

clean:
	rm -rf build theano_queue/_engine*.so doc/_build $(PT_PACKAGE) $(PM_PACKAGE)

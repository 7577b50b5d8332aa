# The two commands of README.rst:  make demo  (train on digits fed by a Queue)
#                                   make test  (the test suite)
# Both install what they need on a fresh Debian bookworm machine first.
VENV        ?= .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
EXT         := build/engine.stamp
ENGINE_SRC  := $(wildcard c_code/tq_*.c c_code/tq_*.h) setup.py
# The venv's own Theano defaults (scripts/install-deps.sh) make THEANO_FLAGS optional.

.PHONY: test demo bench doc deps clean
# The doc builds run whatever pytest says (a failed test must not hide a broken
# doc); the target still fails when any of the three did.
test: $(EXT)
	@status=0; \
	$(PY) -m pytest $(PYTEST_ARGS) || status=1; \
	$(PY) -m sphinx -q -b doctest doc doc/_build/doctest || status=1; \
	$(PY) -m sphinx -q -n -W --keep-going -b html doc doc/_build/html || status=1; \
	exit $$status

demo: $(EXT)
	$(PY) examples/train_digits.py $(DEMO_ARGS)

# Through the command, which refuses at once where Theano is not on a GPU
# rather than replace the figures of record in doc/ (BENCH_ARGS='--out PATH'
# writes elsewhere).
bench: $(EXT)
	$(PY) -m theano_queue bench $(BENCH_ARGS)

doc: $(EXT)
	$(PY) -m sphinx -q -b html doc doc/_build/html

deps: $(STAMP)

$(STAMP): setup.py scripts/install-deps.sh
	bash scripts/install-deps.sh $(VENV)
	touch $@

# The engine extension, rebuilt when its sources change.
$(EXT): $(STAMP) $(ENGINE_SRC)
	$(PY) setup.py -q build_ext --inplace
	mkdir -p build && touch $@

clean:
	rm -rf build theano_queue/_engine*.so doc/_build

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
test: $(EXT)
	$(PY) -m pytest $(PYTEST_ARGS)
	$(PY) -m sphinx -q -n -W --keep-going -b html doc doc/_build/html

demo: $(EXT)
	$(PY) examples/train_digits.py $(DEMO_ARGS)

bench: $(EXT)
	$(PY) bench/run.py $(BENCH_ARGS)

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

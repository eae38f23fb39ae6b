# `make venv`: .venv from scratch (pinned), with the series applied to its sglang.
# `make test`: every test (builds the venv first when missing or out of date),
#   spread over pytest-xdist workers. Most of the slow tests wait on
#   subprocesses (stand-in servers, sglpatch runs), so more workers than CPUs
#   pay: TEST_WORKERS=N sets their number, TEST_WORKERS=0 runs in one process.
# `make test-fast`: the edit loop: the same without the tests marked slow
#   (end-to-end harness runs against the stand-in server, every prefix of
#   the series imported).
# `make test-candidates`: the trial patches' own unit tests, each on the
#   series with that patch (benchmark/candidates/README.md); `make test`
#   only applies them.
VENV := .venv
READY := $(VENV)/.sglpatch-ready
SERIES := $(wildcard python/sglpatch/patches/*)
TEST_WORKERS ?= 4
# One OpenMP thread per process: workers that each ran torch on every CPU
# would spin against one another (a 1 s model test took 40 s beside three).
# Bytecode is written whatever the environment says, under the venv, never
# beside the sources: setup writes no bytecode beside the installed files
# (it compiles torch, transformers, sglang and the other packages the tests
# import the most of into this prefix), so under
# PYTHONDONTWRITEBYTECODE=1 every test process and subprocess compiled them
# from source again (the scheduler's import took about twice as long as
# with bytecode), and the tests check that some commands write nothing into
# their trees.
PYTEST := OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE= \
          PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache \
          $(VENV)/bin/python -m pytest -q -ra \
          -n $(TEST_WORKERS) --dist worksteal

.PHONY: venv test test-fast test-candidates clean

venv: $(READY)

$(READY): scripts/setup_cpu_venv.sh test/requirements-cpu.txt \
          test/harness/sglpatch_cpu_env.py pyproject.toml $(SERIES)
	bash scripts/setup_cpu_venv.sh
	touch $@

test: $(READY)
	$(PYTEST) test

test-fast: $(READY)
	$(PYTEST) -m "not slow" test

test-candidates: $(READY)
	TRIAL_TESTS=1 $(PYTEST) -k trial_patch_tests test/benchmark/test_candidates_cpu.py

clean:
	rm -rf $(VENV)

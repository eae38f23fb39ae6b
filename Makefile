# `make venv`: .venv from scratch (pinned), with the series applied to its sglang.
# `make test`: every test (builds the venv first when missing or out of date),
#   in TEST_WORKERS processes: the unit tests of patched sglang
#   (test/registered) in one, beside pytest-xdist workers for the rest. Most
#   of the slow tests wait on subprocesses (stand-in servers, sglpatch runs),
#   so more processes than CPUs pay: TEST_WORKERS=N sets their number (4),
#   TEST_WORKERS=0 runs everything in one process.
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
PYTEST_ONE := OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE= \
              PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache \
              $(VENV)/bin/python -m pytest -q -ra
PYTEST := $(PYTEST_ONE) -n $(TEST_WORKERS) --dist worksteal
# The unit tests of patched sglang import torch and sglang as they are
# collected, about 15 s of CPU, which every pytest-xdist worker paid once
# more (a quarter of a clean `make test`'s CPU on two cores went to
# collecting). They run in one process of their own, started first, and the
# other TEST_WORKERS - 1 workers collect only the rest; its log follows
# theirs, and either failing fails the target. $(1): pytest's selection.
# IN_UNIT: test files that run in that process too. The first two import
# sglang itself in the test process (18 and 9 s of CPU in a worker that had
# not). The other three spend 35, 13 and 8 s of CPU in interpreters of their
# own (every prefix of the series imported; sglang loading the EAGLE draft
# and taking the FR-Spec launch): the unit tests alone were done in about a
# third of the run and left that process idle while the workers waited on
# stand-in servers with CPU to spare. With them there, `make test` on a
# 2-core machine took 118 and 119 s where it took 132 s twice.
UNIT := test/registered
IN_UNIT := test/docs/test_upstream_names.py test/benchmark/test_dp_mixed_cpu.py \
           test/sglpatch/test_bisectable.py test/benchmark/test_eagle_draft_cpu.py \
           test/benchmark/test_fr_spec_cpu.py
UNIT_LOG := $(VENV)/unit-tests.log
define split_run
	@if [ "$(TEST_WORKERS)" -lt 2 ]; then \
	    $(PYTEST_ONE) $(1) test; exit $$?; \
	fi; \
	$(PYTEST_ONE) -o cache_dir=$(VENV)/pytest-cache-unit $(1) $(UNIT) $(IN_UNIT) \
	    > $(UNIT_LOG) 2>&1 & unit=$$!; \
	$(PYTEST_ONE) -n $$(($(TEST_WORKERS) - 1)) --dist worksteal $(1) \
	    --ignore=$(UNIT) $(IN_UNIT:%=--ignore=%) test; rest=$$?; \
	wait $$unit; unit=$$?; \
	echo "== $(UNIT) $(IN_UNIT), in one process beside the workers:"; \
	cat $(UNIT_LOG); \
	[ $$rest -eq 0 ] && [ $$unit -eq 0 ]
endef

.PHONY: venv test test-fast test-candidates clean

venv: $(READY)

$(READY): scripts/setup_cpu_venv.sh test/requirements-cpu.txt \
          test/harness/sglpatch_cpu_env.py pyproject.toml $(SERIES)
	bash scripts/setup_cpu_venv.sh
	touch $@

test: $(READY)
	$(call split_run,)

test-fast: $(READY)
	$(call split_run,-m "not slow")

test-candidates: $(READY)
	TRIAL_TESTS=1 $(PYTEST) -k trial_patch_tests test/benchmark/test_candidates_cpu.py

clean:
	rm -rf $(VENV)

# `make venv`: .venv from scratch (pinned), with the series applied to its sglang.
# `make test`: every test (builds the venv first when missing or out of date).
VENV := .venv
READY := $(VENV)/.sglpatch-ready
SERIES := $(wildcard python/sglpatch/patches/*)

.PHONY: venv test clean

venv: $(READY)

$(READY): scripts/setup_cpu_venv.sh test/requirements-cpu.txt \
          test/harness/sglpatch_cpu_env.py pyproject.toml $(SERIES)
	bash scripts/setup_cpu_venv.sh
	touch $@

test: $(READY)
	$(VENV)/bin/python -m pytest test -q -ra

clean:
	rm -rf $(VENV)

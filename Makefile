# Development entry points. `make demo` sets everything up and runs the main job on the local sandbox;
# `make test` runs every test. Both work on a fresh machine of this project's kind.
SHELL := /bin/bash
PY := .venv/bin/python
VENV_STAMP := .venv/.installed
# The second venv: ansible-core 2.20 on Python 3.12 (2.20 needs >= 3.12), for its sanity, unit and e2e steps.
VENV220 := .venv-2.20
VENV220_STAMP := $(VENV220)/.installed
# The third: ansible-core 2.21 on Python 3.12 (2.21 supports 3.12 - 3.14 on the controller), the same steps.
VENV221 := .venv-2.21
VENV221_STAMP := $(VENV221)/.installed
COLL_ROOT := .build/collections
COLL_LINK := $(COLL_ROOT)/ansible_collections/kubenodes/image_upgrade
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/$(COLL_ROOT)
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup demo test sanity sanity-2.20 sanity-2.21 units units-2.20 units-2.21 integration lint molecule build lock clean

setup: $(VENV_STAMP) $(VENV220_STAMP) $(VENV221_STAMP) $(COLL_LINK)
	@$(PY) -m sandbox.binaries

$(VENV_STAMP): requirements.txt requirements-dev.txt constraints.txt
	@test -x $(PY) || python3 -m venv .venv
	@echo "setup: installing pinned Python packages into .venv"
	@$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -r requirements-dev.txt
	@touch $@

# .venv-2.20 and .venv-2.21 (.venv-<core>/.installed, the stem is the ansible-core version): Python 3.12 from pyenv
# or PATH (scripts/find-python fails naming where it looked); a venv left on another Python is made again.
# --no-compile: Python compiles only what is imported (saves ~20 s of CPU).
.venv-%/.installed: requirements-%.txt requirements.txt constraints-%.txt
	@if ! .venv-$*/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then \
	  py=$$(scripts/find-python 3.12) || exit 1; \
	  echo "setup: creating .venv-$* with $$py"; \
	  rm -rf .venv-$* && $$py -m venv .venv-$* || exit 1; \
	fi
	@echo "setup: installing pinned Python packages into .venv-$* (ansible-core $*)"
	@.venv-$*/bin/python -m pip install -q --no-compile --disable-pip-version-check -c constraints-$*.txt -r requirements-$*.txt
	@touch $@

# ansible and ansible-test find the collection under ansible_collections/<namespace>/<name>.
$(COLL_LINK):
	@mkdir -p $(dir $@)
	@ln -sfn $(CURDIR) $@

demo: setup
	@$(PY) -m sandbox.demo

test: setup
	@scripts/test-all

sanity: setup
	@scripts/sanity

units: setup
	@$(PY) -m pytest -n 2 tests/unit

# The same under ansible-core 2.20 (.venv-2.20 first on PATH).
sanity-2.20: setup
	@PATH="$(CURDIR)/$(VENV220)/bin:$$PATH" scripts/sanity

units-2.20: setup
	@PATH="$(CURDIR)/$(VENV220)/bin:$$PATH" python -m pytest -n 2 tests/unit

# And under ansible-core 2.21 (.venv-2.21 first on PATH).
sanity-2.21: setup
	@PATH="$(CURDIR)/$(VENV221)/bin:$$PATH" scripts/sanity

units-2.21: setup
	@PATH="$(CURDIR)/$(VENV221)/bin:$$PATH" python -m pytest -n 2 tests/unit

integration: setup
	@$(PY) -m pytest -n 2 --dist loadfile tests/integration

lint: setup
	@.venv/bin/ansible-lint --profile production

# The role against the sandbox (extensions/molecule/default): create, converge, verify, destroy.
molecule: setup
	@.venv/bin/molecule test

build: setup
	@mkdir -p .build/dist && .venv/bin/ansible-galaxy collection build --force --output-path .build/dist .

# Re-resolve the pins after changing requirements*.txt.
lock:
	@rm -rf .build/lockenv && python3 -m venv .build/lockenv
	@.build/lockenv/bin/pip install -q -r requirements-dev.txt
	@{ echo "# Exact versions for development and CI (pip install -c constraints.txt). Regenerate with"; \
	   echo "# 'make lock' after changing requirements*.txt."; .build/lockenv/bin/pip freeze; } > constraints.txt

# Re-resolve constraints-2.20.txt or constraints-2.21.txt (make lock-2.20, make lock-2.21): the versions of
# constraints.txt, but that ansible-core.
lock-%:
	@py=$$(scripts/find-python 3.12) && rm -rf .build/lockenv-$* && $$py -m venv .build/lockenv-$*
	@grep -vE '^(#|ansible-core==)' constraints.txt > .build/lockenv-$*/constraints.txt
	@.build/lockenv-$*/bin/pip install -q -c .build/lockenv-$*/constraints.txt -r requirements-$*.txt
	@{ echo "# Exact versions for .venv-$* (ansible-core $* on Python 3.12): pip install -c constraints-$*.txt"; \
	   echo "# -r requirements-$*.txt. The same versions as constraints.txt but ansible-core; regenerate with"; \
	   echo "# 'make lock-$*' after changing requirements-$*.txt or constraints.txt."; \
	   .build/lockenv-$*/bin/pip freeze; } > constraints-$*.txt

clean:
	@rm -rf .build .pytest_cache

# Development entry points. `make demo` sets everything up and runs the main job on the local sandbox;
# `make test` runs every test. Both work on a fresh machine of this project's kind.
SHELL := /bin/bash
PY := .venv/bin/python
VENV_STAMP := .venv/.installed
COLL_ROOT := .build/collections
COLL_LINK := $(COLL_ROOT)/ansible_collections/kubenodes/image_upgrade
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/$(COLL_ROOT)
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup demo test sanity units integration lint molecule build lock clean

setup: $(VENV_STAMP) $(COLL_LINK)
	@$(PY) -m sandbox.binaries

$(VENV_STAMP): requirements.txt requirements-dev.txt constraints.txt
	@test -x $(PY) || python3 -m venv .venv
	@echo "setup: installing pinned Python packages into .venv"
	@$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -r requirements-dev.txt
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
	@$(PY) -m pytest tests/unit

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

clean:
	@rm -rf .build .pytest_cache

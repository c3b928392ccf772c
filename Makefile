# `make run` opens the GUI on the bundled demo; `make test` passes the tests. Each sets up first.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
FASHION_MNIST := /usr/share/datasets/fashion-mnist

.PHONY: run test setup data browser bench

setup: $(VENV)/.installed

# torch 2.14.1 / torchvision 0.29.1 are the releases this project is tested with (x86_64); elsewhere
# pip picks the newest that installs. The data packages are read as files, so no dependencies;
# torchattacks (a test reference) pins an old requests and lxt (AttnLRP's reference) a transformers release that
# conflicts with diffusers, so they go in without their dependencies too.
$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.14.1 torchvision==0.29.1 || $(PIP) install -q torch torchvision
	$(PIP) install -q -e '.[test,distributed,stable-diffusion]'
	$(PIP) install -q --no-deps mlxtend==0.25.0 foolbox==3.3.4 advertorch==0.2.3 torchattacks==3.5.1 lxt==2.1
	touch $@

data:
	@if [ -f $(FASHION_MNIST)/train-images-idx3-ubyte.gz ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist; \
	else \
	  echo "Fashion-MNIST is not installed; the demo needs it. On Debian or Ubuntu run:"; \
	  echo "    sudo apt-get install dataset-fashion-mnist"; \
	  echo "Elsewhere, put the four Fashion-MNIST .gz files in a folder and set WORKBENCH_FASHION_MNIST_DIR to it."; \
	fi

# The comparison report's test opens it in a real headless browser (Debian's chromium).
browser:
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get install -y -qq chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium); \
	else \
	  echo "chromium is not installed; the test that opens the comparison report in a browser is skipped."; \
	fi

run: setup data
	$(VENV)/bin/workbench

# Two workers, each taking whole test files (so a file's shared set-up is built once).
test: setup data browser
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -n 2 --dist loadfile

bench: setup data
	$(PY) benchmarks/bench_foundation.py

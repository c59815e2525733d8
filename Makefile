# The README's commands. `make install` is implied by the others: nothing to install by hand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build of torch: without this pin pip would pull a multi-GB CUDA build.
# GPU users: `make install TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu124"`
# or install torch into .venv yourself first and run `make install TORCH_SPEC=`.
TORCH_SPEC ?= torch==2.13.0
# test files at a time: four on two cores. About a sixth of the tests' time is waiting (heartbeat
# graces, trial timeouts, storage outages), which more files fill: measured on this 2-core VM,
# 11:18-11:19 at three against 12:04-12:09 at two (an earlier suite); then, back to back on one
# day, 9:04 at four against 9:44 at three (1120 tests, the same CPU: 998 and 1004 s)
TEST_WORKERS ?= 4
# The timm example's own venv: timm imports torchvision, whose PyPI wheels load only beside the
# torch they were built with (a CUDA build, which runs on CPU too; ~5.5 GB), not the CPU torch above
TIMM_VENV ?= .venv-timm
TIMM_TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1

.PHONY: install test examples demo lint bench docs screenshot clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@if [ -n "$(TORCH_SPEC)" ]; then $(BIN)/pip install --quiet $(TORCH_SPEC); fi
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

# TEST_WORKERS test files at a time (pytest-xdist); files stay whole (their tests share fixtures
# and timing), the slowest first (tests/conftest.py SLOWEST_FILES, not xdist's reorder)
# compileall first: with PYTHONDONTWRITEBYTECODE set (as on the CI machine) every process of the
# suite would compile tuner's modules again (~0.1 CPU s each, ~500 processes); it only reads them
test: install
	$(BIN)/python -m compileall -q tuner tests benchmarks > /dev/null
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# examples/ tuned end to end with their real libraries (tests/examples_tests, marked `examples`,
# which `make test` leaves out): Hugging Face and torchmetrics in .venv (the dev extra has them),
# timm in $(TIMM_VENV)
examples: install $(TIMM_VENV)/.installed
	$(BIN)/python -m pytest -q -m examples tests/examples_tests --ignore=tests/examples_tests/test_timm_images.py
	$(TIMM_VENV)/bin/python -m pytest -q -m examples tests/examples_tests/test_timm_images.py

$(TIMM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(TIMM_VENV)
	$(TIMM_VENV)/bin/pip install --quiet --upgrade pip
	$(TIMM_VENV)/bin/pip install --quiet $(TIMM_TORCH_SPEC)
	$(TIMM_VENV)/bin/pip install --quiet -e ".[timm,test]"
	touch $@

# the README's path on the digits MLP: validate, tune within 8,000 training steps (rounds 1 to 3
# at the file's max_train_steps, the delivered model), then the report and its HTML page (which
# `make screenshot` draws); re-running trains nothing again: tune finds its phases finished
DEMO_BUDGET ?= 8000
demo: install
	$(BIN)/tuner validate studies/digits-mlp.yaml
	$(BIN)/tuner tune studies/digits-mlp.yaml --budget $(DEMO_BUDGET) --output-dir runs/demo
	$(BIN)/tuner report studies/digits-mlp.yaml --output-dir runs/demo --html runs/demo/report.html

lint: install
	$(BIN)/ruff check tuner tests benchmarks docs examples
	$(BIN)/ruff format --check tuner tests benchmarks docs examples

bench: install
	$(BIN)/python -m benchmarks

# the documentation site into site/, offline; --strict: a broken link or anchor, a page left out of
# the nav, a study-file field or command option without a description fails the build
# (not --quiet: it hides the warnings --strict counts. MkDocs' and Material's notices about their
# own future are silenced: they are not about this site)
docs: install
	$(BIN)/python -m tuner.cli.reference docs/reference
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict

# the README's picture: the demo's HTML report as headless Chromium draws it, offline
CHROMIUM ?= chromium
screenshot: demo
	$(CHROMIUM) --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
		--host-resolver-rules="MAP * ~NOTFOUND" --virtual-time-budget=10000 \
		--window-size=1280,1000 --screenshot=docs/images/report.png \
		"file://$(CURDIR)/runs/demo/report.html"

clean:
	rm -rf $(VENV) $(TIMM_VENV) runs build site *.egg-info

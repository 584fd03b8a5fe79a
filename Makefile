# make book       — virtual environment, every dependency, the HTML book with every chapter executed
# make test       — the same, then the whole test suite (unit, book, notebooks, browser)
# make notebooks  — one .ipynb per chapter for Colab/Binder, in _build/notebooks/
# make pdf        — the PDF edition from the executed book (no chapter runs again): _build/pdf/attention-book.pdf,
#                   also copied into _build/html/ where the index page links it
# make serve      — preview _build/html on http://127.0.0.1:8000
# make bench      — attention benchmark (ours vs torch SDPA) -> chapters/data/bench-<cpu|cuda>.json
# make robustness — every chapter under seed shifts 1-3, CPU kernels default/avx2/avx512 (those the CPU has), one untuned random
#                   seed shift with portable kernels, and the same on a busy machine (a table)
# make mutation   — mutmut over the core modules with their unit tests -> _build/mutation.md (slow; not in make test)
# make torch-floor — a clean venv with the oldest torch requirements.txt allows (a multi-GB CUDA wheel from PyPI) and
#                   the newest of the rest; runs the package tests and every chapter in it -> docs/torch-floor.md
#                   (not in make test)

PYTHON      ?= python3
VENV        ?= .venv
VENV_FLAGS  ?=
CONSTRAINTS ?= constraints.txt
BIN         := $(VENV)/bin
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PORT        ?= 8000

.PHONY: venv book test notebooks serve browser clean bench robustness mutation pdf torch-floor

$(BIN)/.installed: requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -r requirements-dev.txt
	touch $@

venv: $(BIN)/.installed

# jupyter-cache keys on cell source only, so a change under code/attnbook/ (what chapters import),
# chapters/data/ (results files chapters render, e.g. make bench's JSON) or the requirements
# must drop the cache and Sphinx's doctrees: every chapter then re-executes.
book: venv
	@mkdir -p _build
	@key=$$(find code/attnbook chapters/data requirements.txt requirements-dev.txt -type f \( -name '*.py' -o -name '*.js' -o -name '*.css' -o -name '*.txt' -o -name '*.json' \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16); \
	if [ "$$key" != "$$(cat _build/.code-key 2>/dev/null)" ]; then \
	  echo "code/ changed (key $$key): re-executing every chapter"; \
	  rm -rf _build/.jupyter_cache _build/.doctrees _build/html; \
	fi; \
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going && echo "$$key" > _build/.code-key

browser:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium fonts-noto-cjk; }

notebooks: venv
	$(BIN)/python code/booktools/notebooks.py --out _build/notebooks

pdf: book browser
	$(BIN)/python code/booktools/pdf_edition.py
	cp _build/pdf/attention-book.pdf _build/html/

# Timing claims fail in tests as in the build (outside both they only warn a reader).
test: book browser notebooks pdf
	ATTNBOOK_STRICT_TIMING=1 $(BIN)/python -m pytest

# Every chapter under each variant (ROBUSTNESS_ARGS="--variants seed+1 --chapters softmax" to narrow it;
# "--variants seed+5/cpu=default,busy" to compose; see code/booktools/robustness.py).
robustness: venv
	$(BIN)/python code/booktools/robustness.py $(ROBUSTNESS_ARGS)

# Incremental: only functions changed since the last run are tested again (MUTATION_ARGS=--fresh: all of them;
# MUTATION_ARGS="--modules masks,attention": some modules). Niced, two mutants at a time.
mutation: venv
	nice -n 15 $(BIN)/python code/booktools/mutation.py $(MUTATION_ARGS)

# TORCH_FLOOR_ARGS: --torch 2.4.1 (another version), --chapters a,b, --no-tests (see code/booktools/torch_floor.py).
torch-floor: venv
	nice -n 5 $(BIN)/python code/booktools/torch_floor.py $(TORCH_FLOOR_ARGS)

# Outside the book build: timings need a quiet machine. BENCH_ARGS passes flags (see --help).
bench: venv
	$(BIN)/python code/booktools/bench.py $(BENCH_ARGS)

serve:
	$(BIN)/python -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

clean:
	rm -rf _build

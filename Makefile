# attn-mt: `make train` trains the default model, `make test` runs the tests (both set up .venv first).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
CONFIG ?= configs/d2l_bahdanau.yaml
# A local copy of fra-eng.zip beside the clone is used when present; otherwise $ATTN_MT_DATA, the cache or a download.
ATTN_MT_DATA ?= $(abspath $(wildcard ../shared/data/fra-eng.zip))
ifneq ($(strip $(ATTN_MT_DATA)),)
export ATTN_MT_DATA
endif

.PHONY: install train test soak test-avx2 test-seeds cpu-facts lint check browser catalogues notebooks bench-train bench-translate bench-full clean

$(BIN)/attn-mt: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(BIN)/attn-mt

train: install
	$(BIN)/attn-mt train $(CONFIG) $(ARGS)

# The suite in parallel, one worker per core up to 8 (pytest-xdist; JOBS=1 for one process). Each worker keeps
# torch on one thread (tests/conftest.py), trains its own copy of the shared tiny runs and peaks near 0.8 GB.
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 8 ] && n=8; echo $$n)
test: install browser
	$(BIN)/pytest -n $(JOBS) --dist worksteal

# Load soaks, left out of the default run (pyproject.toml's addopts): serve's flood at a fresh and a warm server.
soak: install
	$(BIN)/pytest -p no:xdist -m soak

# The CPU the tests run on: its model, the SIMD flags that pick torch's kernels, and the ATen kernels in use.
cpu-facts:
	@printf 'CPU: %s\n' "$$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')"
	@printf 'flags: %s\n' "$$(for f in avx2 avx512f avx512_bf16 avx512_vnni amx_tile amx_bf16 amx_int8; do \
	  grep -qw $$f /proc/cpuinfo 2>/dev/null && printf '%s ' $$f; done)"
	@[ ! -x $(BIN)/python ] || $(BIN)/python -c "import torch; print('ATen kernels:', torch.backends.cpu.get_cpu_capability())"

# Float32 sums and int8 rounding follow the SIMD kernels torch picks. On a CPU with AVX-512, run the numerically
# sensitive tests again on the AVX2 kernels (ATen's vectorised ops and fbgemm's int8), so one machine checks
# both families; on an AVX2-only CPU `make test` already ran them. MKL, oneDNN and CTranslate2 follow the CPU.
SENSITIVE_TESTS := tests/test_search.py tests/test_models.py tests/test_models_extra.py tests/test_attention.py \
	tests/test_attention_dumps.py tests/test_packed_attention.py tests/test_training_step.py \
	tests/test_book_import.py tests/test_shipping.py
test-avx2: install
	@if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then \
	  export ATEN_CPU_CAPABILITY=avx2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2; \
	  $(BIN)/python -c "import torch; print('test-avx2: ATen kernels', torch.backends.cpu.get_cpu_capability(), \
	    '(ATEN_CPU_CAPABILITY=avx2), fbgemm int8 on AVX2 (FBGEMM_ENABLE_INSTRUCTIONS=AVX2)')"; \
	  $(BIN)/pytest -n $(JOBS) --dist worksteal $(SENSITIVE_TESTS); \
	else echo "test-avx2: no AVX-512 on this CPU, so make test ran the AVX2 kernels already"; fi

# The tests that compare decodings across engines, kernels and batch shapes, again with the tiny runs trained
# under seeds 1, 2 and 3: other weights put near-ties elsewhere, as another CPU's kernels would (README,
# "Development"). SEEDS="4 5" picks others.
SEEDS ?= 1 2 3
SEED_TESTS := tests/test_ctranslate2.py tests/test_engines.py tests/test_scoring.py tests/test_search.py \
	tests/test_shipping.py tests/test_lines.py tests/test_near_ties.py tests/test_huggingface.py \
	tests/test_lone_space.py tests/test_ensembles.py tests/test_prefix_sampling.py
test-seeds: install
	@for seed in $(SEEDS); do echo "test-seeds: the tiny runs trained under seed $$seed"; \
	  ATTN_MT_TEST_SEED=$$seed $(BIN)/pytest -n $(JOBS) --dist worksteal -p no:cacheprovider $(SEED_TESTS) || exit 1; done

# ruff's rules and formatting (notebooks included), then the layers of the pipeline (import-linter, [tool.importlinter] in pyproject.toml).
lint: install
	$(BIN)/ruff check attn_mt tests scripts notebooks
	$(BIN)/ruff format --check attn_mt tests scripts notebooks
	$(BIN)/lint-imports

check: lint test

# Headless Chromium for the browser tests (report page, serve's explorer) and a CJK font for the pages and
# plots in Chinese: `make test` runs this step, which installs Debian's chromium and fonts-noto-cjk with
# apt-get (as root) only when no `chromium` is on PATH, or fontconfig knows no font for Chinese.
browser:
	command -v chromium >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)
	fc-list :lang=zh family | grep -q . || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y fonts-noto-cjk)

# The catalogues (attn_mt/i18n/locale/*/LC_MESSAGES/attn_mt.po) in step with the strings the code marks:
# new ones added untranslated, those no code marks dropped (docs/languages.md).
catalogues: install
	$(BIN)/python -m attn_mt.i18n.extract

# The notebooks' Chinese and Vietnamese copies (notebooks/zh/, notebooks/vi/) built from the English ones and the
# catalogues (docs/notebooks.md): run it after translating what `make catalogues` added.
notebooks: install
	$(BIN)/python -m attn_mt.i18n.notebooks

bench-train: install
	$(BIN)/python scripts/bench_train.py $(ARGS)

bench-translate: install
	$(BIN)/python scripts/bench_translate.py $(ARGS)

bench-full: install
	$(BIN)/python scripts/bench_full_corpus.py configs/transformer.yaml --minutes 60 --out docs/bench/transformer $(ARGS)
	$(BIN)/python scripts/bench_full_corpus.py configs/bahdanau.yaml --minutes 60 --out docs/bench/bahdanau $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .import_linter_cache *.egg-info

# scripts/gpu.py's three subcommands (docs/gpu.md). `make gpu-check PYTHON=python3` runs it with that Python and
# its (CUDA) torch as they are: no .venv, no pip, no network (this checkout on PYTHONPATH, where the script imports
# attn_mt from). Without PYTHON=, .venv is set up first, as for every other target.
ifeq ($(origin PYTHON),command line)
GPU_CHECK_PYTHON := $(PYTHON)
GPU_CHECK_NEEDS :=
gpu-check profile-step gpu-checkup: export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
else
GPU_CHECK_PYTHON := $(BIN)/python
GPU_CHECK_NEEDS := install
endif
# Every model, AMP mode, resume, translate/eval, CTranslate2 and serve on this machine's CUDA device(s), one table
# and runs/gpu_check.json; ARGS=--quick takes ~8 GPU minutes, ARGS="--device cpu --quick" is the CPU version.
.PHONY: gpu-check
gpu-check: $(GPU_CHECK_NEEDS)
	$(GPU_CHECK_PYTHON) scripts/gpu.py check $(ARGS)

# The training step of configs/transformer-gpu.yaml profiled on one card (docs/gpu.md, "Profiling the step"):
# variants reference and reference+compile, each 20 warm-up, 40 timed and 3 profiled steps on synthetic batches
# (no corpus); figures, profile.json and chrome traces in runs/profile/. TORCH_LOGS=recompiles names any recompile.
.PHONY: profile-step
profile-step: $(GPU_CHECK_NEEDS)
	TORCH_LOGS=recompiles $(GPU_CHECK_PYTHON) scripts/gpu.py profile --out runs/profile $(ARGS)

# The first command where a GPU is at hand (docs/gpu.md): check --quick (with the CTranslate2 float16 row), and the
# profile of the eager step and of the whole step captured as CUDA graphs (data.batch_shapes=8), in at most 9
# minutes of one card and no network; one table in runs/gpu_checkup/checkup.md. ARGS="--data FILE" names the
# corpus, ARGS=--dry-run lists the commands.
.PHONY: gpu-checkup
gpu-checkup: $(GPU_CHECK_NEEDS)
	$(GPU_CHECK_PYTHON) scripts/gpu.py checkup $(ARGS)

# The only set-up a person needs: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0
PYTEST_ARGS ?=

.PHONY: venv demo test test-fast lint docs clean browser bench quant gguf hub-latest test-hub-latest latest test-latest llama-server gpu-check gpu-smoke gpu-wheels

# torch goes in first and stays pinned through constraints.txt: otherwise trl/peft/accelerate pull a
# multi-GB CUDA build into a fresh venv. pins.txt holds the training libraries at the releases the suite
# is pinned to (`make test-latest` runs the newest). Re-installs only when pyproject.toml or the pins change.
$(STAMP): pyproject.toml constraints.txt pins.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -c constraints.txt -c pins.txt -e '.[all,test]'
	touch $(STAMP)

venv: $(STAMP)

# An overlay venv's own `gym` command (pyproject's console script, the checkout's code, no dependencies: the
# overlay sees the main venv's), so `.venv-gguf/bin/gym serve --backend llamacpp` runs as `gym` does.
OVERLAY_GYM = $(1)/bin/python -m pip install -q --no-deps -e .

# GPTQ/AWQ (the `quantize` extra): GPTQModel 7.6.0 pins numpy < 2.3, so it lives in an overlay venv that
# sees the main one through a .pth file and holds only what GPTQModel changes (numpy, its own packages).
# tests/model/test_quantized.py runs the quantize -> LoRA -> serve -> export flow in it. GPTQModel compiles
# its CPU packing kernel on first use (~30 s on 2 cores): built here, into Gym's cache, where the flow finds it.
QVENV  := .venv-quant
QSTAMP := $(QVENV)/.installed
$(QSTAMP): $(STAMP)
	test -x $(QVENV)/bin/python || $(PYTHON) -m venv $(QVENV)
	$(BIN)/python -c "import sysconfig; print('import site; site.addsitedir(%r)' % sysconfig.get_paths()['purelib'])" \
		> "$$($(QVENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_gym_main_venv.pth"
	$(QVENV)/bin/python -m pip install -q -c constraints.txt "gptqmodel==7.6.0" "optimum>=1.20"
	$(call OVERLAY_GYM,$(QVENV))
	$(QVENV)/bin/python -c "from gym.model.quantized import gptqmodel_environment; gptqmodel_environment(); \
		from gptqmodel.utils.cpp import load_pack_block_extension; assert load_pack_block_extension()" \
		> $(QVENV)/kernel-build.log 2>&1 || echo "GPTQModel's CPU kernel did not build now (see $(QVENV)/kernel-build.log): it builds on first use"
	touch $(QSTAMP)

quant: $(QSTAMP)

# GGUF serving (`gym serve --backend llamacpp`, the `gguf` extra): llama-cpp-python is published as source
# only and compiles llama.cpp (5-8 min on 2 cores the first time; pip caches the wheel, after which this
# takes ~13 s). Its own overlay venv, seeing the main one as .venv-quant does, so the main venv and
# `make test` never wait for the compiler; the llama.cpp tests skip, naming this target, until it exists.
GVENV  := .venv-gguf
GSTAMP := $(GVENV)/.installed
$(GSTAMP): $(STAMP)
	test -x $(GVENV)/bin/python || $(PYTHON) -m venv $(GVENV)
	$(BIN)/python -c "import sysconfig; print('import site; site.addsitedir(%r)' % sysconfig.get_paths()['purelib'])" \
		> "$$($(GVENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_gym_main_venv.pth"
	$(GVENV)/bin/python -m pip install -q -c constraints.txt "llama-cpp-python==0.3.36" "gguf>=0.19"
	$(call OVERLAY_GYM,$(GVENV))
	touch $(GSTAMP)

gguf: $(GSTAMP)

# The huggingface_hub a fresh `pip install` resolves (1.33: uploads through Xet without asking, asks
# /api/agent-harnesses), in an overlay venv seeing the main one as .venv-quant does; the dev venv keeps 1.16.
# `make test-hub-latest` runs tests/hub with it (docs/testing.md: which transfer paths, which versions).
HVENV  := .venv-hub-latest
HSTAMP := $(HVENV)/.installed
$(HSTAMP): $(STAMP)
	test -x $(HVENV)/bin/python || $(PYTHON) -m venv $(HVENV)
	$(BIN)/python -c "import sysconfig; print('import site; site.addsitedir(%r)' % sysconfig.get_paths()['purelib'])" \
		> "$$($(HVENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_gym_main_venv.pth"
	$(HVENV)/bin/python -m pip install -q -c constraints.txt "huggingface_hub==1.33.0" "hf_xet>=1.8"
	$(call OVERLAY_GYM,$(HVENV))
	touch $(HSTAMP)

hub-latest: $(HSTAMP)

test-hub-latest: $(HSTAMP)
	$(HVENV)/bin/python -m pytest tests/hub -q -p no:cacheprovider $(PYTEST_ARGS)

# The newest releases of the libraries Gym trains and talks to the Hub with, over the pinned .venv (an
# overlay: its own site-packages first, the main venv's after), whatever pyproject's upper bounds say: a
# bound marks a release proven broken, and this is how one is proven. `make test-latest` runs the suite
# there; CI runs it beside the pinned `make test` (.github/workflows/ci.yml, job latest-releases).
LVENV  := .venv-latest
LSTAMP := $(LVENV)/.installed
LATEST := transformers peft trl accelerate datasets huggingface_hub tokenizers
$(LSTAMP): $(STAMP)
	test -x $(LVENV)/bin/python || $(PYTHON) -m venv $(LVENV)
	$(BIN)/python -c "import sysconfig; print('import site; site.addsitedir(%r)' % sysconfig.get_paths()['purelib'])" \
		> "$$($(LVENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_gym_main_venv.pth"
	$(LVENV)/bin/python -m pip install -q -c constraints.txt --upgrade $(LATEST)
	$(call OVERLAY_GYM,$(LVENV))
	$(LVENV)/bin/python -m pip list 2>/dev/null | grep -iE '^($(shell echo $(LATEST) | tr ' ' '|')) ' > $(LVENV)/versions.txt
	touch $(LSTAMP)

latest: $(LSTAMP)

test-latest: $(LSTAMP)
	cat $(LVENV)/versions.txt
	PATH="$(CURDIR)/$(LVENV)/bin:$$PATH" $(LVENV)/bin/python -m pytest -q -p no:cacheprovider -n 2 \
		tests/config tests/data tests/train tests/model tests/eval tests/api tests/engine tests/hub $(PYTEST_ARGS)

# llama.cpp's own C++ `llama-server`, for bench/cpu_space.py's side-by-side row only (nothing in Gym runs
# it): built from the llama.cpp sources llama-cpp-python's sdist vendors, so it is the same llama.cpp as
# the llamacpp backend's. No network at build time (no curl, no prebuilt web UI); about 10 min on 2 cores.
LLAMA_CPP_PY  := 0.3.36
LLAMA_SDIST   := .bench/llama_cpp_python-$(LLAMA_CPP_PY)
LLAMA_SERVER  := .bench/llama.cpp/bin/llama-server
$(LLAMA_SERVER):
	test -d $(LLAMA_SDIST)/vendor/llama.cpp || { \
		$(BIN)/python -m pip download -q --no-deps --no-binary :all: -d .bench "llama-cpp-python==$(LLAMA_CPP_PY)" \
		&& tar -xzf .bench/llama_cpp_python-$(LLAMA_CPP_PY).tar.gz -C .bench; }
	cmake -S $(LLAMA_SDIST)/vendor/llama.cpp -B .bench/llama.cpp -DCMAKE_BUILD_TYPE=Release \
		-DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF
	cmake --build .bench/llama.cpp --target llama-server -j2

llama-server: $(LLAMA_SERVER)

# The main job: the quickstart gym.toml end to end on the built-in tiny model (train -> eval -> card).
demo: $(STAMP)
	$(BIN)/gym validate examples/quickstart/gym.toml
	$(BIN)/gym launch examples/quickstart/gym.toml

# Headless Chromium for the test that opens the Space's chat page as a person would (Debian's package).
# Installed when missing and we are root with apt-get; otherwise that one test skips and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium could not be installed: the headless page test will be skipped"

# worksteal: an idle worker takes queued tests from the busy one (tests/conftest.py puts the slow files first).
# The Space tests install a Space from its own requirements.txt into a venv of its own (tests/space_runtime.py):
# built here once (a few minutes: the default Space's and, with `make gguf`'s wheel, the GGUF Space's) and kept
# in .venv-space/ until the requirements change.
test: $(STAMP) $(QSTAMP) browser
	$(BIN)/python -m tests.space_runtime
	$(BIN)/python -m pytest -n 2 --dist worksteal $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist worksteal -m "not slow" $(PYTEST_ARGS)

# Side-by-side performance against LLaMA-Factory, plain TRL and `transformers serve` (not part of `make test`):
# builds the peers' venv under .bench/ (once) and the 26M model, runs each comparison, prints one table of ratios.
bench: $(STAMP)
	$(BIN)/python bench/run_all.py

# On a machine with a CUDA GPU (docs/gpu.md): tests/gpu, then one table (bench/gpu_check.py, < 8 min on an
# H200). No venv: it runs under that machine's python, which has torch; `make gpu-wheels` (here, with
# network) fetches the rest into .bench/gpu-wheels for it.
GPU_PYTHON ?= python3
GPU_OUT    ?= .bench/gpu-check
GPU_WHEELS := .bench/gpu-wheels
gpu-check:
	PYTHONPATH="$(CURDIR):$$PYTHONPATH" $(GPU_PYTHON) -m pytest tests/gpu -m gpu -q -p no:cacheprovider
	PYTHONPATH="$(CURDIR):$$PYTHONPATH" $(GPU_PYTHON) bench/gpu_check.py --out $(GPU_OUT)

# Every row of the GPU table at toy size on this CPU (make test runs two of them).
gpu-smoke: $(STAMP)
	GYM_GPU_SMOKE_ROWS=all $(BIN)/python -m pytest tests/gpu/test_gpu_check_smoke.py -q -p no:cacheprovider

gpu-wheels:
	rm -rf $(GPU_WHEELS)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d $(GPU_WHEELS) -r bench/gpu/device-wheels.txt

lint: $(STAMP)
	$(BIN)/ruff check gym tests bench action
	$(BIN)/ruff format --check gym tests bench action

docs: $(STAMP)
	$(BIN)/gym schema --markdown -o docs/gym-toml.md
	$(BIN)/gym schema -o docs/gym.schema.json

clean:
	rm -rf $(VENV) $(QVENV) $(GVENV) $(HVENV) $(LVENV) .venv-space .pytest_cache .ruff_cache .hypothesis outputs .bench

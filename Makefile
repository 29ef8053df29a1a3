# smallkv: one Makefile for the library, the tools, the tests and the benchmarks.
#   make              build everything (CPU backend)
#   make test         build and run the test suite
#   make SAN=1 test   the same under AddressSanitizer + UBSan (separate build dir)
#   make models       fetch the model files into models/ (scripts/fetch-models.sh)
#   make bench        speed benchmark table
#   make bench-ab BASE=rev   decode speed of the working tree against rev, as ratios
#   make CUDA=1       with the CUDA backend (kernels/cuda/, nvcc + cuBLAS; dir build-cuda/)
#   make install PREFIX=~/.local   library (static + shared), header, smallkv.pc, tools
#   make data         fetch the evaluation data sets into data/ (scripts/fetch-data.sh)
#   make profiles     rebuild the shipped profiles (scripts/make-profiles.sh)
CC      ?= gcc
SAN     ?= 0
CUDA    ?= 0
OPT     ?= -O2
BUILD   := build$(if $(filter 1,$(SAN)),-san,)$(if $(filter 1,$(CUDA)),-cuda,)

CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $(OPT) -g -fopenmp \
           -mavx2 -mfma -mf16c -MMD -MP -I. $(shell pkg-config --cflags libcjson 2>/dev/null)
LDLIBS  := -fopenmp -lzstd -lcjson -lm
SAN_FLAGS := -fsanitize=address,undefined
ifeq ($(SAN),1)
CFLAGS  += $(SAN_FLAGS) -fno-sanitize-recover=all -fno-omit-frame-pointer
LDLIBS  += $(SAN_FLAGS)
endif

# the library (libsmallkv.a, installed): the runtime only: shared helpers, kernels, file
# formats, model and tokenizer, KV tiers, policies, forward pass, session, devices, public API.
# The programs sit on top: the calibration library (calibrate/, mapgen/ but the tools'
# mains) under `calibrate` and `mapgen`, the evaluation library (eval/ but the `smallkv
# eval` command itself) under `smallkv`; tests and benchmarks link all three.
TOOL_MAINS := calibrate/calibrate.c mapgen/mapgen.c
LIB_DIRS := common kernels kernels/cpu runtime/format runtime/tokenizer runtime/model runtime/kv \
            runtime/engine runtime/policies runtime/session runtime/backend runtime/api
LIB_SRC := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB     := $(BUILD)/libsmallkv.a
CALIB_SRC := $(filter-out $(TOOL_MAINS),$(wildcard calibrate/*.c mapgen/*.c))
CALIB_LIB := $(BUILD)/libskvcalib.a
EVAL_SRC  := $(wildcard eval/*.c)
EVAL_LIB  := $(BUILD)/libskveval.a
# what a program or test links, dependents first
PROG_LIBS := $(EVAL_LIB) $(CALIB_LIB) $(LIB)

# CUDA backend (make CUDA=1, build dir build-cuda/): kernels/cuda/*.cu compiled by nvcc
# (CUDA C++, machine code for sm_80 and sm_90) into the same library; C files get
# SKV_CUDA=1; links cudart + cuBLAS. With CUDA=0 nothing CUDA is built and
# tests/test_cuda.c skips every case.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVCCFLAGS := -std=c++17 $(OPT) -g -lineinfo $(CUDA_ARCH) -Werror all-warnings -I. \
             -Xcompiler -Wall,-Wextra,-Werror,-fPIC -MMD -MP
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
ifeq ($(CUDA),1)
CU_SRC  := $(wildcard kernels/cuda/*.cu)
LIB_OBJ += $(CU_SRC:%.cu=$(BUILD)/%.o)
CFLAGS  += -DSKV_CUDA=1
LDLIBS  += $(CUDA_LIBS)
endif

# tools: one main per file
TOOL_SRC := runtime/cli/smallkv.c $(wildcard calibrate/calibrate.c) $(wildcard mapgen/mapgen.c) \
            $(wildcard bench/bench.c) $(wildcard bench/bench_pair.c) \
            $(wildcard bench/bench_kernels.c) $(wildcard bench/bench_spec_batch.c) $(wildcard bench/logits_hash.c) \
            $(wildcard bench/slm_rank.c) $(wildcard bench/bench_prefill.c)
TOOLS    := $(foreach s,$(TOOL_SRC),$(BUILD)/bin/$(basename $(notdir $(s))))
# MPI=1: also build calibrate-mpi (calibrate/calibrate.c with SKV_MPI, compiled and linked
# with mpicc): MPI ranks run shards and reduce their fixed-point sums to rank 0; and
# smallkv-mpi (the smallkv command with runtime/cli/eval.c compiled with SKV_MPI): `eval`
# shards its units over the ranks (docs/lab/long-context-tasks.md).
MPI     ?= 0
MPICC   ?= mpicc
ifeq ($(MPI),1)
TOOLS    += $(BUILD)/bin/calibrate-mpi $(BUILD)/bin/smallkv-mpi
endif
# CUDA=1: also the GPU benchmark build-cuda/bin/bench_cuda (bench/bench_cuda.c, run by
# scripts/gpu-check.sh)
ifeq ($(CUDA),1)
TOOLS    += $(BUILD)/bin/bench_cuda
endif
# the smallkv command also carries the server (runtime/serve/, libmicrohttpd)
CLI_SRC  := $(filter-out runtime/cli/smallkv.c,$(wildcard runtime/cli/*.c)) $(wildcard runtime/serve/*.c)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
SERVE_LIBS := -lmicrohttpd -lpthread

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_SUP := $(wildcard tests/support/*.c)
TEST_SUP_OBJ := $(TEST_SUP:%.c=$(BUILD)/%.o)

.PHONY: logits-hash layers data data-test profiles bench-ab bench-prefill all test check run serve serve-load serve-check deps models models-test bench clean tools print-lib-src \
        install uninstall shared
all: $(LIB) $(CALIB_LIB) $(EVAL_LIB) $(TOOLS) $(TEST_BIN)
tools: $(TOOLS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(CALIB_LIB): $(CALIB_SRC:%.c=$(BUILD)/%.o)
	@rm -f $@
	ar rcs $@ $^
$(EVAL_LIB): $(EVAL_SRC:%.c=$(BUILD)/%.o)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/bin/smallkv: $(BUILD)/runtime/cli/smallkv.o $(CLI_OBJ) $(EVAL_LIB) $(CALIB_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(SERVE_LIBS)
$(BUILD)/bin/%: $(BUILD)/calibrate/%.o $(CALIB_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/calibrate/calibrate-mpi.o: calibrate/calibrate.c
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -DSKV_MPI -c $< -o $@
$(BUILD)/bin/calibrate-mpi: $(BUILD)/calibrate/calibrate-mpi.o $(CALIB_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/runtime/cli/eval-mpi.o: runtime/cli/eval.c
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -DSKV_MPI -c $< -o $@
$(BUILD)/bin/smallkv-mpi: $(BUILD)/runtime/cli/smallkv.o $(filter-out $(BUILD)/runtime/cli/eval.o,$(CLI_OBJ)) \
                          $(BUILD)/runtime/cli/eval-mpi.o $(EVAL_LIB) $(CALIB_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(SERVE_LIBS)
$(BUILD)/bin/%: $(BUILD)/mapgen/%.o $(CALIB_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/bin/%: $(BUILD)/bench/%.o $(PROG_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
# the read bandwidth probe both CPU benchmarks report against
$(BUILD)/bin/bench $(BUILD)/bin/bench_kernels: $(BUILD)/bench/read_probe.o
# the shared-core check `make bench` prints beside it, the compute probe and the multi-row rows
$(BUILD)/bin/bench: $(BUILD)/bench/cpu_probe.o $(BUILD)/bench/compute_probe.o $(BUILD)/bench/bench_multirow.o

# logits_hash: a public-API program (bench/logits_hash.c); `make logits-hash` prints every
# policy's decode fingerprint on the test model, to compare two builds of a refactor
$(BUILD)/bench/logits_hash.o: CFLAGS += -Iinclude
logits-hash: $(BUILD)/bin/logits_hash
	OMP_NUM_THREADS=2 $(BUILD)/bin/logits_hash models/SmolLM2-135M-Instruct.Q4_1.gguf \
	  models/SmolLM2-135M-Instruct.Q4_1.gguf profiles/smollm2-135m-self.skvprof

# examples/*.c: programs written against the public header include/smallkv.h only
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/bin/%,$(wildcard examples/*.c))
all: $(EXAMPLES)
$(BUILD)/examples/%.o: CFLAGS += -Iinclude
$(BUILD)/bin/%: $(BUILD)/examples/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# ---- install: make install [PREFIX=/usr/local] [DESTDIR=], make uninstall (same PREFIX) ----
# Installs (README "Install"; tests/test_install.c builds examples/ against the result):
#   $(PREFIX)/lib/libsmallkv.a                  the build's archive, as the tools link it
#   $(PREFIX)/lib/libsmallkv.so.$(SKV_VERSION)  the shared library, soname libsmallkv.so.$(SKV_SOVERSION),
#     with the links libsmallkv.so.$(SKV_SOVERSION) and libsmallkv.so; it exports only the
#     smallkv_* API (smallkv.map) and records its own dependencies (libgomp, zstd, cJSON, m)
#   $(PREFIX)/include/smallkv.h                 the public header, nothing else
#   $(PREFIX)/lib/pkgconfig/smallkv.pc          from smallkv.pc.in, with PREFIX substituted
#   $(PREFIX)/bin/{smallkv,calibrate,mapgen}    the tools (MPI=1: also smallkv-mpi)
# DESTDIR is put in front of every path (a staging root for packagers); smallkv.pc names
# PREFIX alone. The shared library is built only for install (or `make shared`), from -fPIC
# copies of the library's objects in $(BUILD)/pic/: the archive, the tools and the tests keep
# their position-dependent code. CUDA=1: the .cu objects are already -fPIC and go in as they
# are; smallkv.pc then also lists cuBLAS/cudart. SAN=1 installs the sanitizer build, and
# smallkv.pc asks for the sanitizer runtime in every link (ASan must be loaded first).
SKV_VERSION   := 0.1.0
SKV_SOVERSION := 0
PREFIX  ?= /usr/local
DESTDIR ?=
SONAME  := libsmallkv.so.$(SKV_SOVERSION)
SHLIB   := $(BUILD)/libsmallkv.so.$(SKV_VERSION)
PIC_OBJ := $(LIB_SRC:%.c=$(BUILD)/pic/%.o) $(CU_SRC:%.cu=$(BUILD)/%.o)
INSTALL_TOOLS := $(BUILD)/bin/smallkv $(BUILD)/bin/calibrate $(BUILD)/bin/mapgen
ifeq ($(MPI),1)
INSTALL_TOOLS += $(BUILD)/bin/smallkv-mpi
endif
# smallkv.pc: beyond -lsmallkv, what every link needs (Libs) and what a static link needs
# (Libs.private; zstd and cJSON come through Requires.private, from their own .pc files)
PC_LIBS         := $(if $(filter 1,$(SAN)), $(SAN_FLAGS),)
PC_LIBS_PRIVATE := $(if $(filter 1,$(CUDA)), $(CUDA_LIBS),)
I_LIB := $(DESTDIR)$(PREFIX)/lib
I_INC := $(DESTDIR)$(PREFIX)/include
I_BIN := $(DESTDIR)$(PREFIX)/bin
I_PC  := $(DESTDIR)$(PREFIX)/lib/pkgconfig

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -c $< -o $@

# -z defs: every symbol the library uses resolves at its own link (none left to the program)
$(SHLIB): $(PIC_OBJ) smallkv.map
	$(CC) $(CFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=smallkv.map -Wl,-z,defs \
	  $(PIC_OBJ) -o $@ $(LDLIBS)
shared: $(SHLIB)

# written next to the build's objects (to a temporary name, then renamed), installed from there
$(BUILD)/smallkv.pc: smallkv.pc.in FORCE
	@mkdir -p $(dir $@)
	@sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(SKV_VERSION)|g' \
	  -e 's|@LIBS_EXTRA@|$(PC_LIBS)|g' -e 's|@LIBS_PRIVATE_EXTRA@|$(PC_LIBS_PRIVATE)|g' \
	  $< > $@.tmp && mv $@.tmp $@
.PHONY: FORCE
FORCE:

install: $(LIB) $(SHLIB) $(BUILD)/smallkv.pc $(INSTALL_TOOLS)
	install -d "$(I_LIB)" "$(I_INC)" "$(I_BIN)" "$(I_PC)"
	install -m 644 $(LIB) "$(I_LIB)/libsmallkv.a"
	install -m 755 $(SHLIB) "$(I_LIB)/libsmallkv.so.$(SKV_VERSION)"
	ln -sfn libsmallkv.so.$(SKV_VERSION) "$(I_LIB)/$(SONAME)"
	ln -sfn $(SONAME) "$(I_LIB)/libsmallkv.so"
	install -m 644 include/smallkv.h "$(I_INC)/smallkv.h"
	install -m 644 $(BUILD)/smallkv.pc "$(I_PC)/smallkv.pc"
	install -m 755 $(INSTALL_TOOLS) "$(I_BIN)/"

# removes the files install writes, then those of its directories that are left empty
uninstall:
	rm -f "$(I_LIB)/libsmallkv.a" "$(I_LIB)/libsmallkv.so.$(SKV_VERSION)" "$(I_LIB)/$(SONAME)" \
	  "$(I_LIB)/libsmallkv.so" "$(I_INC)/smallkv.h" "$(I_PC)/smallkv.pc" \
	  $(foreach t,$(notdir $(INSTALL_TOOLS)),"$(I_BIN)/$(t)")
	@for d in "$(I_PC)" "$(I_LIB)" "$(I_INC)" "$(I_BIN)"; do \
	  if [ -d "$$d" ]; then rmdir --ignore-fail-on-non-empty "$$d"; fi; done

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_SUP_OBJ) $(PROG_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcmocka

# test_longctx runs `smallkv eval` (and with MPI=1 `mpirun -n 2 smallkv-mpi eval`)
$(BUILD)/tests/test_longctx: | $(BUILD)/bin/smallkv $(if $(filter 1,$(MPI)),$(BUILD)/bin/smallkv-mpi)

# test_serve talks to `smallkv serve` (the built binary) over HTTP with libcurl
$(BUILD)/tests/test_serve: $(BUILD)/tests/test_serve.o $(TEST_SUP_OBJ) $(PROG_LIBS) | $(BUILD)/bin/smallkv
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcmocka -lcurl
# test_serve_json: JSON mode's automaton and masked sampling, without a server or a model
$(BUILD)/tests/test_serve_json: $(BUILD)/tests/test_serve_json.o $(BUILD)/runtime/serve/json_constrain.o \
                                $(BUILD)/runtime/serve/sample.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcmocka

test: all layers
	@BUILD=$(BUILD) tests/run.sh $(TEST_BIN)
# folders form layers that only point down (scripts/check-layers.py; docs/architecture.md)
layers:
	@scripts/check-layers.py

# The README's two commands. `check`: install, fetch the test model, build, run the tests.
check: deps
	scripts/fetch-models.sh test
	scripts/fetch-data.sh --allow-missing test
	$(MAKE) -j$(shell nproc) all
	$(MAKE) test
# `run`: install, fetch the default models, build, run the main job on them.
run: deps
	scripts/fetch-models.sh $(if $(RUN_MODELS),$(RUN_MODELS),all)
	$(MAKE) all
	scripts/run-main.sh

# `make serve`: the server on the default pair (as `make run` picks it: Qwen2.5-Coder 1.5B with
# the 0.5B as SLM and the shipped profile, policy smallkv at budget 0.2) on 127.0.0.1:8080;
# SERVE_ARGS adds flags (--port, --api-key, ...). `make serve-load`: a bounded load test on
# loopback with SmolLM2 (scripts/serve-load.py; docs/performance.md, "Server").
SERVE_ARGS ?=
serve: deps
	scripts/fetch-models.sh $(if $(RUN_MODELS),$(RUN_MODELS),all)
	$(MAKE) $(BUILD)/bin/smallkv
	$(BUILD)/bin/smallkv serve --llm models/qwen2.5-coder-1.5b.gguf --slm models/qwen2.5-coder-0.5b.gguf \
	  --profile profiles/qwen2.5-coder-0.5b-1.5b.skvprof --policy smallkv --budget 0.2 $(SERVE_ARGS)
serve-load: $(BUILD)/bin/smallkv
	scripts/serve-load.py --bin $(BUILD)/bin/smallkv $(SERVE_LOAD_ARGS)
# the server's optional checks: the JSON-mode automaton (no model), the `openai` Python
# client, lm-evaluation-harness's OpenAI backends on a few local GSM8K items (`make data`),
# the page in headless Chromium (each skips when its tool is missing). SERVE_PYTHON: the
# Python that has the clients (e.g. a venv's bin/python).
SERVE_PYTHON ?= python3
serve-check: $(BUILD)/bin/smallkv $(BUILD)/tests/test_serve_json
	$(BUILD)/tests/test_serve_json
	BUILD=$(BUILD) $(SERVE_PYTHON) tests/serve_openai.py
	BUILD=$(BUILD) $(SERVE_PYTHON) tests/serve_lmeval.py
	BUILD=$(BUILD) tests/serve_page.sh

deps:
	scripts/install-deps.sh

# the evaluation data sets, pinned by sha256 (scripts/data-manifest.tsv), into data/ (or
# $$SKV_DATA_DIR): from their public sources, else from a mirror folder named by SKV_DATA
# (docs/data.md); `data-test` only the sets the test suite reads, and missing ones only warn
data:
	scripts/fetch-data.sh
data-test:
	scripts/fetch-data.sh --allow-missing test

models:
	scripts/fetch-models.sh all
models-test:
	scripts/fetch-models.sh test

# BENCH=quick: shorter runs and a 1024-token pair context; BENCH=pair: only the pair rows;
# BENCH=multirow: only the compute probe and the multi-row rows (issue 44); BENCH=long: also
# prefill at 4096 tokens (several words combine: BENCH="multirow long")
bench: all
	$(BUILD)/bin/bench $(if $(filter quick,$(BENCH)),--quick,) $(if $(filter pair,$(BENCH)),--pair-only,) \
	  $(if $(filter multirow,$(BENCH)),--multirow-only,) $(if $(filter long,$(BENCH)),--long,)

# time to first token on long prompts (bench/bench_prefill.c: tokens/s, matrix GFLOP/s, peak
# RSS); scripts/llamacpp-prefill.sh runs it beside llama.cpp's llama-bench
PREFILL_TOKENS ?= 512,4096,16384
PREFILL_MODELS ?= models/qwen2.5-coder-1.5b.gguf
bench-prefill: all
	@for m in $(PREFILL_MODELS); do $(BUILD)/bin/bench_prefill $$m --tokens $(PREFILL_TOKENS) --reps 1 || exit 1; done

# the working tree's decode speed against revision BASE (default HEAD) as ratios measured in
# rebuild the shipped profiles from data/ (scripts/make-profiles.sh; about 20 min
# on 2 cores; `make profiles PROFILES=smollm2` for one; resumes from $(BUILD)/profiles-work/)
profiles: tools | data
	BUILD=$(BUILD) scripts/make-profiles.sh $(PROFILES)

# one process, both builds side by side (scripts/bench-ab.sh, bench/bench_pair.c)
bench-ab:
	scripts/bench-ab.sh $(or $(BASE),HEAD)

# the library's sources, one line (scripts/bench-ab.sh builds two trees from them)
print-lib-src:
	@echo $(LIB_SRC)

clean:
	rm -rf build build-san build-cuda build-san-cuda

# ---- robustness: libFuzzer targets (fuzz/fuzz_*.c) and valgrind (docs/robustness.md) ----
#   make fuzz-build      build every fuzz target with clang into build-fuzz/
#   make fuzz            ... and run each for FUZZ_SECONDS (default 600); crashes -> fuzz-out/
#   make fuzz FUZZ_TARGETS=gguf FUZZ_SECONDS=60     one target, one minute
#   make valgrind        the CLI's main paths under valgrind memcheck (tests/valgrind.sh)
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 600
FUZZ_BUILD   := build-fuzz
FUZZ_TARGETS ?= $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -O1 -g -fopenmp -mavx2 -mfma -mf16c -MMD -MP -I. \
                -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
                $(shell pkg-config --cflags libcjson 2>/dev/null)
FUZZ_LIB     := $(FUZZ_BUILD)/libsmallkv.a
FUZZ_LIB_OBJ := $(TEST_SUP:%.c=$(FUZZ_BUILD)/%.o) $(FUZZ_LIB)
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)

.PHONY: fuzz fuzz-build fuzz-seeds valgrind
fuzz-build: $(FUZZ_BINS)
fuzz: fuzz-build
	FUZZ_BUILD=$(FUZZ_BUILD) fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_LIB): $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o) $(CALIB_SRC:%.c=$(FUZZ_BUILD)/%.o) $(EVAL_SRC:%.c=$(FUZZ_BUILD)/%.o)
	@rm -f $@
	ar rcs $@ $^
$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/fuzz/fuzz_%.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)
# the server's request parser lives in the smallkv command, not the library
$(FUZZ_BUILD)/fuzz_serve_request: $(FUZZ_BUILD)/fuzz/fuzz_serve_request.o $(FUZZ_BUILD)/runtime/serve/request.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)

# seeds: fuzz/corpus/<target>/ from fuzz/gen_seeds.c (committed; rerun after format changes)
fuzz-seeds: $(FUZZ_BUILD)/gen_seeds
	$(FUZZ_BUILD)/gen_seeds
$(FUZZ_BUILD)/gen_seeds: $(FUZZ_BUILD)/fuzz/gen_seeds.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $^ -o $@ $(LDLIBS)

valgrind: all
	BUILD=$(BUILD) tests/valgrind.sh

-include $(shell find build build-san build-fuzz build-cuda build-san-cuda -name '*.d' 2>/dev/null)

# ---- evaluation recipes (smallkv eval; docs/results.md): lab.mk ----
include lab.mk

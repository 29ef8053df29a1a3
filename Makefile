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

# the library: every stage's code but the tools' mains (calibrate/calibrate.c,
# mapgen/mapgen.c) and the smallkv CLI (runtime/cli/, and eval/'s `smallkv eval` command)
TOOL_MAINS := calibrate/calibrate.c mapgen/mapgen.c
EVAL_CMD   := eval/tasks.c eval/report.c
LIB_DIRS := common kernels/cpu runtime/api runtime/model runtime/tokenizer runtime/kv runtime/policies \
            runtime/session runtime/backend profiles calibrate mapgen eval
LIB_SRC := $(filter-out $(TOOL_MAINS) $(EVAL_CMD),$(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB     := $(BUILD)/libsmallkv.a

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
            $(wildcard bench/bench_kernels.c) $(wildcard bench/bench_spec_batch.c)
TOOLS    := $(foreach s,$(TOOL_SRC),$(BUILD)/bin/$(basename $(notdir $(s))))
# MPI=1: also build calibrate-mpi (calibrate/calibrate.c with SKV_MPI, compiled and linked
# with mpicc): MPI ranks run shards and reduce their fixed-point sums to rank 0.
MPI     ?= 0
MPICC   ?= mpicc
ifeq ($(MPI),1)
TOOLS    += $(BUILD)/bin/calibrate-mpi
endif
# CUDA=1: also the GPU benchmark build-cuda/bin/bench_cuda (bench/bench_cuda.c, run by
# scripts/gpu-check.sh)
ifeq ($(CUDA),1)
TOOLS    += $(BUILD)/bin/bench_cuda
endif
# the smallkv command also carries the server (runtime/serve/, libmicrohttpd)
CLI_SRC  := $(filter-out runtime/cli/smallkv.c,$(wildcard runtime/cli/*.c)) $(EVAL_CMD) $(wildcard runtime/serve/*.c)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
SERVE_LIBS := -lmicrohttpd -lpthread

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_SUP := $(wildcard tests/support/*.c)
TEST_SUP_OBJ := $(TEST_SUP:%.c=$(BUILD)/%.o)

.PHONY: data data-test profiles bench-ab all test check run serve serve-load serve-check deps models models-test bench clean tools print-lib-src \
        install uninstall shared
all: $(LIB) $(TOOLS) $(TEST_BIN)
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

$(BUILD)/bin/smallkv: $(BUILD)/runtime/cli/smallkv.o $(CLI_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(SERVE_LIBS)
$(BUILD)/bin/%: $(BUILD)/calibrate/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/calibrate/calibrate-mpi.o: calibrate/calibrate.c
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -DSKV_MPI -c $< -o $@
$(BUILD)/bin/calibrate-mpi: $(BUILD)/calibrate/calibrate-mpi.o $(LIB)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/bin/%: $(BUILD)/mapgen/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/bin/%: $(BUILD)/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
# the read bandwidth probe both CPU benchmarks report against
$(BUILD)/bin/bench $(BUILD)/bin/bench_kernels: $(BUILD)/bench/read_probe.o
# the shared-core check `make bench` prints beside it
$(BUILD)/bin/bench: $(BUILD)/bench/cpu_probe.o

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
#   $(PREFIX)/bin/{smallkv,calibrate,mapgen}    the tools
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

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_SUP_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcmocka

# test_serve talks to `smallkv serve` (the built binary) over HTTP with libcurl
$(BUILD)/tests/test_serve: $(BUILD)/tests/test_serve.o $(TEST_SUP_OBJ) $(LIB) | $(BUILD)/bin/smallkv
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcmocka -lcurl

test: all
	@BUILD=$(BUILD) tests/run.sh $(TEST_BIN)

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
# the server's optional checks: the `openai` Python client, the page in headless Chromium
# (each skips when its tool is missing)
serve-check: $(BUILD)/bin/smallkv
	BUILD=$(BUILD) tests/serve_openai.py
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

# BENCH=quick: shorter runs and a 1024-token pair context; BENCH=pair: only the pair rows
bench: all
	$(BUILD)/bin/bench $(if $(filter quick,$(BENCH)),--quick,) $(if $(filter pair,$(BENCH)),--pair-only,)

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
$(FUZZ_LIB): $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o)
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

# ---- evaluation (smallkv eval; docs/results.md) ----
#   make eval-quick   test pair (SmolLM2 as SLM and LLM), reduced grid, minutes on 2 cores
#   make eval         evaluation pair (Qwen2.5-Coder 0.5B SLM, 1.5B LLM), in resumable pieces
#                     of under two hours each on 2 cores:
#                     make eval-fidelity eval-ablation eval-passkey eval-speed eval-gsm8k
#                     eval-gsm8k-200 eval-gsm8k-rest eval-gsm8k-equal-memory eval-passkey-retrieval
#                     eval-bbh-retrieval eval-equal-memory
#                     (each resumes its results/*.json; interrupt and rerun at will). One exact
#                     prefill per document / prompt is derived into every cell, and the cells
#                     decode together in batches (--batch).
EVAL_THREADS ?= 2
EVAL_NICE    ?= nice -n 5
# the older accuracy records (results/*.json) were made with the stored-row decode kernels
# (before the 8-row groups, docs/performance.md): SKV_PACK=0 resumes them with those kernels
# (later commits changed rounding elsewhere, so an old unit is not always reproduced to the
# last digit; every table compares the cells of one unit, which run together); set
# EVAL_LAYOUT= for a fresh set with the default (faster) layout. eval-speed times the
# shipped kernels either way.
EVAL_LAYOUT  ?= SKV_PACK=0
EVAL_ENV     ?= OMP_WAIT_POLICY=PASSIVE $(EVAL_LAYOUT)
SKV          := $(BUILD)/bin/smallkv
SMOL         := models/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_PROF    := profiles/smollm2-135m-self.skvprof
SMOL_MAP     := $(if $(wildcard $(SMOL_PROF)),--profile $(SMOL_PROF),--mapping online)
QWEN_SLM     := models/qwen2.5-coder-0.5b.gguf
QWEN_LLM     := models/qwen2.5-coder-1.5b.gguf
QWEN_PROF    := profiles/qwen2.5-coder-0.5b-1.5b.skvprof
QWEN_MAP     := $(if $(wildcard $(QWEN_PROF)),--profile $(QWEN_PROF),--mapping online)
# SnapKV, PyramidKV and Ada-KV keep every generated token by default (as published); the
# records here were made holding the budget while decoding, which decode=evict keeps (its
# label omits the option, so those records resume and stay comparable)
EVAL_POLICIES ?= full,streamingllm,h2o,snapkv:decode=evict,pyramidkv:decode=evict,adakv:decode=evict,ems,smallkv:score=acc,smallkv
# the default smallkv ranks tokens by this step's SLM row (score=now); score=acc is the
# method's accumulated score, which the first ablations below vary
EVAL_ABLATION ?= smallkv:score=acc:nosal,smallkv:score=acc:nomarg,smallkv:score=acc:sum,smallkv:score=acc:mass,smallkv:score=acc:online,smallkv:score=acc:depth=24,smallkv:score=acc:slmb=0.4,smallkv:score=now,smallkv:score=mean
EVAL_TASK_POLICIES ?= full,h2o,snapkv:decode=evict,pyramidkv:decode=evict,ems,smallkv
EVAL_BUDGETS  ?= 0.05,0.1,0.2,0.4
EVAL_LIMIT    ?= 100
QUICK := $(EVAL_ENV) $(EVAL_NICE) $(SKV) eval --llm $(SMOL) --slm $(SMOL) $(SMOL_MAP) --threads $(EVAL_THREADS)
QEVAL := $(EVAL_ENV) $(EVAL_NICE) $(SKV) eval --llm $(QWEN_LLM) --slm $(QWEN_SLM) $(QWEN_MAP) --threads $(EVAL_THREADS)
# eval-speed times the steps, so it runs like `generate` (OpenMP's default wait policy, no
# nice): OMP_WAIT_POLICY=PASSIVE puts a thread to sleep at each of a step's ~200 barriers
# and made the SLM's step 1.3x slower (10.8 vs 8.1 ms); run it on an otherwise idle machine
QEVAL_SPEED := $(SKV) eval --llm $(QWEN_LLM) --slm $(QWEN_SLM) $(QWEN_MAP) --threads $(EVAL_THREADS)
# the newer evaluations (sections 11-14 of docs/results.md) run the default (8-row group) layout
QEVAL_PACKED := OMP_WAIT_POLICY=PASSIVE $(EVAL_NICE) $(QEVAL_SPEED)

.PHONY: eval-equal-memory eval-gsm8k-equal-memory eval-passkey-retrieval eval-bbh-retrieval eval-gsm8k-200 eval-gsm8k-rest eval-spec eval-spec-batch eval-spec-gsm8k eval-retrieval eval-quick eval-combine eval eval-fidelity eval-ablation eval-passkey eval-speed eval-calibration eval-gsm8k eval-report
eval-quick: $(SKV) | data
	@mkdir -p results
	$(QUICK) fidelity --tokens 768 --prefill 512 --budgets 0.1,0.2 \
	  --policies full,streamingllm,h2o,snapkv:decode=evict,pyramidkv:decode=evict,adakv:decode=evict,ems,smallkv:score=acc:sum,smallkv:score=acc:mass,smallkv:score=acc,smallkv \
	  -o results/quick-fidelity.json
	$(QUICK) passkey --lengths 1024 --depths 0,50,100 --budgets 0.2 \
	  --policies full,h2o,snapkv:decode=evict,smallkv:score=acc:sum,smallkv:score=acc,smallkv -o results/quick-passkey.json
	$(SKV) eval report results/quick-fidelity.json results/quick-passkey.json -o results/quick.md
# the combine rule of the marginal compensation under the method's score (docs/results.md
# section 7): 640-token documents, 127 decode steps, the test pair and the evaluation pair;
# a few minutes on 2 cores
eval-combine: $(SKV) | data
	@mkdir -p results
	$(QUICK) fidelity --policies full,smallkv:score=acc:sum,smallkv:score=acc:mass,smallkv:score=acc:renorm \
	  --budgets 0.8,0.3 --tokens 640 --prefill 512 --corpora wikitext2 -o results/quick-fidelity-combine.json
	$(QEVAL) fidelity --policies full,h2o,smallkv:score=acc:sum,smallkv:score=acc:mass,smallkv:score=acc:renorm \
	  --budgets 0.1,0.2 --tokens 640 --prefill 512 --corpora wikitext2 -o results/qwen-fidelity-combine.json

# query-aware selection against its bound on the test pair (docs/results.md section 9,
# docs/lab/retrieval.md): SmallKV's two scores, Quest and the oracle, with SnapKV as
# published (decode=keep) and held to the budget, the 1535-step protocol
RETRIEVAL_POLICIES ?= full,streamingllm,h2o,snapkv,snapkv:decode=evict,quest,oracle,smallkv:score=acc,smallkv
eval-retrieval: $(SKV) | data
	@mkdir -p results
	$(QUICK) fidelity --budgets 0.1,0.2 --policies $(RETRIEVAL_POLICIES) --batch 16 -o results/smol-retrieval.json

# equal hot budget and equal total memory (docs/results.md section 11): 4 documents of
# wikitext2, multi_news and pg-essays; baselines at the hot budget, then given the SLM cache's bytes
# (41 % of the LLM's full cache at depth 23: 10 % -> 51 %, 20 % -> 61 %), then SmallKV with
# its SLM cache compressed (slmb) into 10 % / 20 % in total, and the oracle bound at 10 % / 20 %;
# about 150 min on 2 cores; the
# default (8-row) decode layout, unlike the older records
# the committed records hold documents 0-3 of each corpus; EQMEM_DOCS=8 (the issue's sample)
# resumes them with 4-7, about 10 min a document for the first line's cells on 2 idle cores
EQMEM_DOCS ?= 4
EQMEM := $(QEVAL_PACKED) \
	fidelity --tokens 768 --prefill 512 --limit $(EQMEM_DOCS) --corpora wikitext2,multi_news,pg-essays --batch 16 -o results/qwen-equal-memory.json
eval-equal-memory: $(SKV) | data
	@mkdir -p results
	$(EQMEM) --policies full,h2o,streamingllm,snapkv,quest,smallkv:score=acc,smallkv --budgets 0.1,0.2
	$(EQMEM) --policies h2o,streamingllm,snapkv,quest --budgets 0.51,0.61
	$(EQMEM) --policies smallkv:slmb=0.12,smallkv:score=acc:slmb=0.12 --budgets 0.05
	$(EQMEM) --policies smallkv:slmb=0.24,smallkv:score=acc:slmb=0.24 --budgets 0.1
	$(EQMEM) --policies oracle --budgets 0.1,0.2

# GSM8K at 10 % on 200 problems (docs/results.md section 12): SmallKV score=now against
# Quest, the oracle bound, SnapKV as published and the full cache; the default layout;
# about 40 s a problem on 2 cores; resumable
eval-gsm8k-200: $(SKV) | data
	@mkdir -p results
	$(QEVAL_PACKED) \
	  gsm8k --policies full,smallkv,quest,oracle,snapkv --budgets 0.1 --limit 200 -o results/qwen-gsm8k-200.json
# the rest of the issue's GSM8K set (docs/results.md section 12): H2O, StreamingLLM, Ada-KV
# and score=acc at 10 % on 200 problems (1 h 45 min on 2 idle cores), then every policy at 5 %
# on 100 (1 h 12 min); the full cache's answers are those of results/qwen-gsm8k-200.json:
# report both files together
eval-gsm8k-rest: $(SKV) | data
	@mkdir -p results
	$(QEVAL_PACKED) \
	  gsm8k --policies h2o,streamingllm,adakv,smallkv:score=acc --budgets 0.1 --limit 200 -o results/qwen-gsm8k-200.json
	$(QEVAL_PACKED) \
	  gsm8k --policies h2o,streamingllm,snapkv,adakv,quest,oracle,smallkv:score=acc,smallkv --budgets 0.05 --limit 100 \
	  -o results/qwen-gsm8k-5pct.json

# GSM8K at equal total device memory (docs/results.md section 15), 100 problems: SmallKV
# score=now at 10 % hot with its SLM cache compressed (slmb) to 24 %, 20 % in total, against
# Quest and H2O at 20 % and given the SLM cache's whole bytes as hot budget (10 % -> 51 %);
# the other cells are those of results/qwen-gsm8k-200.json (report both files together);
# about 1 h on 2 cores; resumable
GSM8K_EQMEM := $(QEVAL_PACKED) gsm8k --limit 100 -o results/qwen-gsm8k-equal-memory.json
eval-gsm8k-equal-memory: $(SKV) | data
	@mkdir -p results
	$(GSM8K_EQMEM) --policies smallkv:slmb=0.24 --budgets 0.1
	$(GSM8K_EQMEM) --policies quest,h2o --budgets 0.2,0.51

# speculative decoding (scripts/spec-bench.sh, docs/performance.md): the plain full cache
# and SmallKV at 20 %, each with the SLM drafting 2 / 4 (/ 6) tokens, adaptively up to 6, and
# with a draft vocabulary of 32768 ids; greedy text checked identical to plain decoding; run on
# an otherwise idle machine
eval-spec: $(SKV) | data
	@mkdir -p results
	SPEC_KS="2 4 a6 4v32768" scripts/spec-bench.sh > results/spec-full.txt.tmp && mv results/spec-full.txt.tmp results/spec-full.txt
	SPEC_POLICY=smallkv SPEC_BUDGET=0.2 SPEC_KS="2 4 6 a6 2v32768 4v32768" scripts/spec-bench.sh > results/spec-smallkv.txt.tmp && \
	  mv results/spec-smallkv.txt.tmp results/spec-smallkv.txt
	@cat results/spec-full.txt results/spec-smallkv.txt
# several sequences together (smallkv_generate_batch) against one by one, plain and drafting
# (scripts/spec-batch.sh, docs/performance.md); about 10 min on 2 cores; an idle machine
eval-spec-batch: all
	@mkdir -p results
	scripts/spec-batch.sh > results/spec-batch.txt.tmp && mv results/spec-batch.txt.tmp results/spec-batch.txt
	@cat results/spec-batch.txt
# acceptance at task scale: GSM8K with the SLM drafting 4 tokens, full cache and SmallKV at
# 20 % (each cell alone; answers equal the plain cells'; resumable); the default layout
eval-spec-gsm8k: $(SKV) | data
	@mkdir -p results
	$(QEVAL_PACKED) gsm8k --policies full,smallkv --budgets 0.2 --limit 50 --draft 4 -o results/qwen-gsm8k-draft.json

eval: eval-fidelity eval-ablation eval-passkey eval-passkey-retrieval eval-speed eval-gsm8k eval-gsm8k-200 eval-gsm8k-rest eval-gsm8k-equal-memory eval-bbh-retrieval eval-equal-memory eval-report
# the 1535-step protocol (N = 2048, P = 512), one document per corpus, every policy and budget
eval-fidelity: $(SKV) | data
	@mkdir -p results
	$(QEVAL) fidelity --policies $(EVAL_POLICIES) --budgets $(EVAL_BUDGETS) --batch 32 -o results/qwen-fid2048.json
# SmallKV ablations at 10 / 20 %, the same documents and protocol
eval-ablation: $(SKV) | data
	@mkdir -p results
	$(QEVAL) fidelity --policies $(EVAL_ABLATION) --budgets 0.1,0.2 --batch 32 -o results/qwen-fid2048-ablation.json
# 15 (length, depth) cells, each with 3 variants (--variants default: own key and phrasing);
# resumes a single-variant results file, whose records are variant 0
eval-passkey: $(SKV) | data
	@mkdir -p results
	$(QEVAL) passkey --policies $(EVAL_POLICIES) --budgets 0.1,0.2 --variants 1 -o results/qwen-passkey.json
# the retrieval comparison on passkey (docs/results.md section 13): SmallKV (both scores)
# against Quest, the oracle bound and the baselines as published, 3 keys and phrasings per
# (length, depth) cell, all records from one commit; resumable
eval-passkey-retrieval: $(SKV) | data
	@mkdir -p results
	$(QEVAL) passkey --policies full,streamingllm,h2o,snapkv,quest,oracle,smallkv:score=acc,smallkv --budgets 0.1,0.2 \
	  --variants 3 -o results/qwen-passkey-retrieval.json
# speed and memory ratios: every cell stepped alone and timed (--batch 1), a shorter document
eval-speed: $(SKV) | data
	@mkdir -p results
	$(QEVAL_SPEED) fidelity --policies full,h2o,snapkv:decode=evict,smallkv:score=acc,smallkv --budgets 0.1,0.2 --tokens 1024 \
	  --corpora wikitext2 --batch 1 -o results/qwen-speed.json
eval-calibration: $(SKV) | data
	@mkdir -p results
	$(if $(wildcard $(QWEN_PROF)),$(QEVAL) calibration --budgets 0.1,0.2 -o results/qwen-calibration.json,@echo "eval-calibration: $(QWEN_PROF) missing, skipped")
# GSM8K at 10 % and 20 % on 100 problems (not run yet; docs/results.md section 4): the baselines held to the
# budget, SmallKV's two scores and the full cache; the default layout (its full-cache answers
# are those of results/qwen-gsm8k-200.json); about 1.5 min a problem on 2 cores; resumable
eval-gsm8k: $(SKV) | data
	@mkdir -p results
	$(QEVAL_PACKED) gsm8k --policies $(EVAL_TASK_POLICIES),smallkv:score=acc --budgets 0.1,0.2 --limit $(EVAL_LIMIT) \
	  -o results/qwen-gsm8k.json
# BBH with 10 prompts per task (docs/results.md section 14): SmallKV's two scores against Quest,
# the oracle bound, the baselines as published and the full cache; the default layout, a clean
# commit; about 2.7 min a prompt for the 15 cells on 2 cores (108 min); resumable
eval-bbh-retrieval: $(SKV) | data
	@mkdir -p results
	$(QEVAL_PACKED) \
	  bbh --policies full,streamingllm,h2o,snapkv,quest,oracle,smallkv:score=acc,smallkv --budgets 0.1,0.2 \
	  --limit 10 -o results/qwen-bbh-retrieval.json
eval-report: $(SKV) | data
	$(SKV) eval report $(wildcard results/qwen-*.json) -o docs/results-qwen.md

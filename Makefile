# smallkv: one Makefile for the library, the tools, the tests and the benchmarks.
#   make              build everything (CPU backend)
#   make test         build and run the test suite
#   make SAN=1 test   the same under AddressSanitizer + UBSan (separate build dir)
#   make models       fetch the model files into models/ (scripts/fetch-models.sh)
#   make bench        speed benchmark table
#   make CUDA=1       (reserved for the CUDA backend, kernels/cuda/)
CC      ?= gcc
SAN     ?= 0
CUDA    ?= 0
OPT     ?= -O2
BUILD   := build$(if $(filter 1,$(SAN)),-san,)

CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $(OPT) -g -fopenmp \
           -mavx2 -mfma -mf16c -MMD -MP $(shell pkg-config --cflags libcjson 2>/dev/null)
LDLIBS  := -fopenmp -lzstd -lcjson -lm
ifeq ($(SAN),1)
CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LDLIBS  += -fsanitize=address,undefined
endif

LIB_SRC := $(wildcard runtime/*.c) $(wildcard kernels/cpu/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB     := $(BUILD)/libsmallkv.a

# tools: one main per file
TOOL_SRC := runtime/cli/smallkv.c $(wildcard calibrate/calibrate.c) $(wildcard mapgen/mapgen.c) \
            $(wildcard bench/bench.c)
TOOLS    := $(foreach s,$(TOOL_SRC),$(BUILD)/bin/$(basename $(notdir $(s))))
CLI_SRC  := $(filter-out runtime/cli/smallkv.c,$(wildcard runtime/cli/*.c))
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_SUP := $(wildcard tests/support/*.c)
TEST_SUP_OBJ := $(TEST_SUP:%.c=$(BUILD)/%.o)

.PHONY: all test check run deps models models-test bench clean tools
all: $(LIB) $(TOOLS) $(TEST_BIN)
tools: $(TOOLS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/bin/smallkv: $(BUILD)/runtime/cli/smallkv.o $(CLI_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/bin/%: $(BUILD)/calibrate/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/bin/%: $(BUILD)/mapgen/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/bin/%: $(BUILD)/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_SUP_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lcmocka

test: all
	@BUILD=$(BUILD) tests/run.sh $(TEST_BIN)

# The README's two commands. `check`: install, fetch the test model, build, run the tests.
check: deps
	scripts/fetch-models.sh test
	$(MAKE) test
# `run`: install, fetch the default models, build, run the main job on them.
run: deps
	scripts/fetch-models.sh $(if $(RUN_MODELS),$(RUN_MODELS),all)
	$(MAKE) all
	scripts/run-main.sh

deps:
	scripts/install-deps.sh

models:
	scripts/fetch-models.sh all
models-test:
	scripts/fetch-models.sh test

bench: all
	$(BUILD)/bin/bench

clean:
	rm -rf build build-san

-include $(shell find build build-san -name '*.d' 2>/dev/null)

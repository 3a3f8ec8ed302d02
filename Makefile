# kiln build. `make` builds build/kiln (with the CUDA backend when nvcc is found),
# `make run` encodes generated sample images, `make test` runs every CPU-side test,
# `make test-gpu` the GPU tests, `make bench` the benchmarks against the anchors.
# Every target first checks the system packages (tools/deps.sh installs what is missing).

CC      ?= gcc
CXX     ?= g++
BUILD   ?= build
NVCC    ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

# -ffp-contract=off / -fmad=false: CPU and GPU must round every float operation alike.
CFLAGS_COMMON = -std=gnu11 -O2 -g -Wall -Wextra -Wno-unused-parameter -ffp-contract=off \
                -fno-fast-math -pthread -I. -MMD -MP
CFLAGS  ?=
LDLIBS  = -lpng -lz -ljansson -lcurl -lcrypto -lzmq -lmicrohttpd -lm -pthread
NVFLAGS = -O3 -std=c++17 -fmad=false -I. -lineinfo \
          -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90 \
          -Xcompiler -ffp-contract=off -MMD -MP

LIB_SRCS  := $(wildcard common/*.c kernels/*.c kernels/*/*.c worker/*.c scheduler/*.c)
CU_SRCS   := $(wildcard kernels/*.cu kernels/*/*.cu)
CLI_SRCS  := $(wildcard cli/*.c)
TEST_SRCS := $(wildcard tests/unit/*.c)
GPUT_SRCS := $(wildcard tests/gpu/*.c)
BENCH_SRCS:= $(wildcard bench/*.c bench/*.cpp)

ifneq ($(NVCC),)
  HAVE_CUDA := 1
  CFLAGS_COMMON += -DKILN_HAVE_CUDA
  CU_OBJS   := $(CU_SRCS:%.cu=$(BUILD)/obj/%.cu.o)
  LDLIBS    += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/targets/x86_64-linux/lib -lcudart_static -lstdc++ -ldl -lrt
else
  CU_OBJS   :=
endif

LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o) $(CU_OBJS)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/obj/%.o)
GPUT_OBJS := $(GPUT_SRCS:%.c=$(BUILD)/obj/%.o)
BENCH_OBJS:= $(patsubst %,$(BUILD)/obj/%.o,$(basename $(BENCH_SRCS)))

DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all deps run test test-unit test-gpu test-gpu-run bench clean help samples
all: $(BUILD)/kiln

help:
	@echo "make            build build/kiln"
	@echo "make run        encode generated sample images into ./out"
	@echo "make test       all CPU tests (unit, containers, PngSuite, CLI)"
	@echo "make test-gpu   GPU tests (needs an NVIDIA GPU): CPU/GPU byte identity"
	@echo "make bench      benchmarks against libsquish, writes bench/out/"

deps: $(DEPS_STAMP)
$(DEPS_STAMP): tools/deps.sh
	@tools/deps.sh
	@mkdir -p $(BUILD) && touch $@

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cpp | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) -O2 -g -std=c++17 -ffp-contract=off -pthread -I. -MMD -MP -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -DKILN_HAVE_CUDA -c $< -o $@

$(BUILD)/libkiln.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kiln: $(CLI_OBJS) $(BUILD)/libkiln.a
	$(CC) -o $@ $(CLI_OBJS) $(BUILD)/libkiln.a $(LDLIBS)

$(BUILD)/tests/unit: $(TEST_OBJS) $(BUILD)/libkiln.a
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(TEST_OBJS) $(BUILD)/libkiln.a -lcriterion $(LDLIBS)

$(BUILD)/tests/gpu: $(GPUT_OBJS) $(BUILD)/libkiln.a
	@mkdir -p $(dir $@)
	$(CC) -o $@ $(GPUT_OBJS) $(BUILD)/libkiln.a -lcriterion $(LDLIBS)

$(BUILD)/kiln-bench: $(BENCH_OBJS) $(BUILD)/libkiln.a
	$(CXX) -o $@ $(BENCH_OBJS) $(BUILD)/libkiln.a -lsquish -lastcenc $(LDLIBS)

samples: $(BUILD)/kiln
	@mkdir -p $(BUILD)/samples
	$(BUILD)/kiln samples -o $(BUILD)/samples

run: $(BUILD)/kiln samples
	@mkdir -p out
	$(BUILD)/kiln run --input $(BUILD)/samples --output out --quality high --mipmaps
	$(BUILD)/kiln encode --format bc1 --quality high --container ktx2 --mipmaps $(BUILD)/samples/*.png -o out
	@ls -l out

# The unit binary is run with the repository root as working directory: tests find
# build/kiln and ../shared/data from there. KILN_SHARED overrides the data location.
test: $(BUILD)/tests/unit $(BUILD)/kiln
	KILN_BIN=$(BUILD)/kiln $(BUILD)/tests/unit --jobs=2 $(TESTFLAGS)

test-gpu: $(BUILD)/tests/gpu $(BUILD)/kiln test-gpu-run
# Runs the already-built GPU tests: on the GPU machine, which has no compilers.
test-gpu-run:
	KILN_BIN=$(BUILD)/kiln $(BUILD)/tests/gpu --jobs=1 $(TESTFLAGS)

bench: $(BUILD)/kiln-bench
	@mkdir -p bench/out
	$(BUILD)/kiln-bench $(BENCHFLAGS)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

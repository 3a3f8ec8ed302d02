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

.PHONY: all deps run test test-unit test-gpu test-gpu-run bench clean help samples soak fuzz test-asan
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
	$(CXX) -o $@ $(BENCH_OBJS) $(BUILD)/libkiln.a -lsquish -lastcenc -lspng $(LDLIBS)

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

# Long reliability runs (tests/unit/test_faults.c, suite soak): a 100,000-item job on 8
# workers and 1,000 simulated workers joining and leaving (KILN_SOAK_SECONDS, default 240).
soak: $(BUILD)/tests/unit $(BUILD)/kiln
	KILN_SOAK=1 KILN_BIN=$(BUILD)/kiln $(BUILD)/tests/unit --jobs=1 --filter 'soak/*' $(TESTFLAGS)

test-gpu: $(BUILD)/tests/gpu $(BUILD)/kiln test-gpu-run
# Runs the already-built GPU tests: on the GPU machine, which has no compilers.
test-gpu-run:
	KILN_BIN=$(BUILD)/kiln $(BUILD)/tests/gpu --jobs=1 $(TESTFLAGS)

bench: $(BUILD)/kiln-bench
	@mkdir -p bench/out
	$(BUILD)/kiln-bench $(BENCHFLAGS)

# `make fuzz`: libFuzzer targets (tests/fuzz/fuzz_*.c) built with clang, ASan and UBSan
# against the library sources they exercise, compiled here with the same clang and
# sanitizers (not libkiln.a: that is gcc/nvcc, without coverage). No CUDA: gpu_stubs.c.
# Each target runs FUZZ_SECONDS; findings land in tests/fuzz/regressions/ (tests/fuzz/run.sh).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= png container proto spec png_kiln inflate_par astc astc_encode
FUZZ_DIR      = $(BUILD)/fuzz
FUZZ_CFLAGS   = -std=gnu11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter \
                -ffp-contract=off -pthread -I. -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB_SRCS = common/alloc.c common/buf.c common/container.c common/error.c common/fileio.c \
                common/image.c common/log.c common/png_io.c common/host.c common/pool.c common/proto.c \
                common/texture.c common/uri.c kernels/blockbatch.c kernels/astc/astc_cpu.c kernels/bc1/bc1_cpu.c kernels/gpu_stubs.c kernels/png/png_dec_cpu.c scheduler/spec.c
FUZZ_LIB_OBJS = $(FUZZ_LIB_SRCS:%.c=$(FUZZ_DIR)/obj/%.o)
FUZZ_HDRS     = $(wildcard common/*.h kernels/*.h kernels/*/*.h scheduler/spec.h tests/fuzz/*.h)

$(FUZZ_DIR)/obj/%.o: %.c $(FUZZ_HDRS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB_OBJS) $(FUZZ_HDRS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) -lpng -lz -ljansson -lm

# (the objects are named here too, so make keeps them between runs)
fuzz: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%) $(FUZZ_LIB_OBJS)
	tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(BUILD)/kiln $(FUZZ_TARGETS)

# `make test-asan`: the unit tests (and the kiln binary they drive) built with gcc under
# ASan and UBSan in ASAN_BUILD, without CUDA, then run as `make test` runs them. LeakSanitizer
# stays on: a leak in a kiln process changes its exit status (which the tests check); a
# leak inside a Criterion test process is only printed, so the log is kept and
# tests/asan/check-leaks.sh fails the run on any report with a frame outside libcriterion
# (whose runner leaks a little at exit: its exit status 23 alone is then let pass).
ASAN_BUILD ?= build-asan
ASAN_CC     = $(CC) -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
ASAN_ENV    = ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=0 \
              LSAN_OPTIONS=exitcode=23:suppressions=$(CURDIR)/tests/asan/lsan.supp \
              UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# deploy_images is left out by default: it checks that the release binary's shared
# libraries map to Debian packages for the Docker images, and an ASan binary loads
# libasan and libubsan by design. TESTFLAGS replaces the filter.
ASAN_TESTFLAGS ?= --filter='!(deploy_images)/*'

test-asan:
	$(MAKE) BUILD=$(ASAN_BUILD) NVCC= CC="$(ASAN_CC)" $(ASAN_BUILD)/tests/unit $(ASAN_BUILD)/kiln
	@{ $(ASAN_ENV) KILN_BIN=$(ASAN_BUILD)/kiln $(ASAN_BUILD)/tests/unit --jobs=2 \
	     $(or $(TESTFLAGS),$(ASAN_TESTFLAGS)); echo $$? >$(ASAN_BUILD)/test-asan.rc; } 2>&1 \
	   | tee $(ASAN_BUILD)/test-asan.log
	@tests/asan/check-leaks.sh $(ASAN_BUILD)/test-asan.log
	@rc=$$(cat $(ASAN_BUILD)/test-asan.rc); \
	 if [ $$rc = 23 ] && grep -q 'Failing: 0 | Crashing: 0' $(ASAN_BUILD)/test-asan.log; then rc=0; fi; \
	 if [ $$rc != 0 ]; then echo "test-asan: the unit tests failed (exit $$rc)"; fi; exit $$rc

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

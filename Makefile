# xsp: the two commands a newcomer needs are `make demo` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
CC ?= gcc
MSGPACK := $(shell pkg-config --exists msgpack-c 2>/dev/null && echo msgpack-c || echo msgpack)
# msgpack-c's compile and link flags; set MSGPACK_FLAGS where pkg-config is missing
MSGPACK_FLAGS ?= $(shell pkg-config --cflags --libs $(MSGPACK))
CFLAGS_DEV := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wstrict-prototypes -Wshadow -Werror -g -O1 \
              -Icsrc -Itests/c
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
CORE_SRC := $(wildcard csrc/core/*.c)
GPU_SRC := $(wildcard csrc/gpu/*.c)
CUDA_HOME ?= /usr/local/cuda
# The GPU source's tests need CUPTI's headers and library (no GPU): skipped, loudly, without.
CUPTI_H := $(firstword $(wildcard $(CUDA_HOME)/include/cupti.h \
                                   $(CUDA_HOME)/extras/CUPTI/include/cupti.h))
HAVE_CUPTI := $(if $(CUPTI_H),1)
GPU_INC := -isystem $(dir $(CUPTI_H)) -isystem $(CUDA_HOME)/include
IO_SRC := $(wildcard csrc/io/*.c)
# yajl's flags (the Kineto reader, csrc/io/kjson.c); set YAJL_FLAGS where pkg-config is missing
YAJL_FLAGS ?= $(shell pkg-config --cflags --libs yajl)
BIN := tests/c/bin
OUT ?= out

.PHONY: setup demo test ctest pytest bench clean

setup:
	./scripts/setup.sh

demo: setup
	$(PY) -m xsp.demo --out $(OUT)

# the test tools (chromium for the browser check) are installed by setup when this is set;
# with it set, tests/py/report/test_browser.py fails instead of skipping when chromium is missing
test: export XSP_TEST_TOOLS := 1
test: setup ctest pytest

# C unit tests, plain and under ASan + UBSan.
#
# Each test tests/c/test_X.c names what it is linked with: test_X_SRC (the sources besides its
# own file), test_X_LIBS (libraries and their flags) and, where it needs more, test_X_CFLAGS.
# One pattern rule builds $(BIN)/test_X from them and another $(BIN)/test_X_san, the same with
# $(SAN).  ctest runs each test of CTEST in that order, plain then sanitized, except those of
# CTEST_SAN_ONLY, which run under the sanitizers only.  A binary is rebuilt when its sources,
# any header or this Makefile change.
test_core_SRC := $(CORE_SRC)
test_core_LIBS := -lpthread
test_data_SRC := $(CORE_SRC)
test_data_LIBS := -lpthread -lm
test_io_SRC := $(IO_SRC) csrc/core/strtab.c csrc/core/trace.c
test_io_LIBS := $(MSGPACK_FLAGS) $(YAJL_FLAGS) -lz -lm
test_names_SRC := $(CORE_SRC)
test_names_LIBS := -lpthread
test_kjson_SRC := $(IO_SRC) csrc/core/strtab.c csrc/core/trace.c
test_kjson_LIBS := $(MSGPACK_FLAGS) $(YAJL_FLAGS) -lz -lm
test_jsonw_SRC := csrc/io/jsonw.c csrc/io/kinetow.c csrc/io/kmemw.c csrc/io/chromew.c \
                  csrc/io/otlpw.c csrc/io/otlpspan.c csrc/core/strtab.c csrc/core/trace.c
test_jsonw_LIBS := -lz -lm
test_otlppb_SRC := csrc/io/otlppb.c csrc/io/otlpspan.c csrc/io/jsonw.c csrc/core/strtab.c \
                   csrc/core/trace.c
test_otlppb_LIBS := -lz -lm
test_tmerge_SRC := csrc/core/strtab.c csrc/core/trace.c csrc/core/tmerge.c
test_spawn_SRC := csrc/core/strtab.c csrc/core/trace.c csrc/core/spawn.c
test_session_SRC := $(CORE_SRC)
test_session_LIBS := -lpthread
test_trace_select_SRC := csrc/core/strtab.c csrc/core/trace.c
test_schedule_SRC := $(CORE_SRC)
test_schedule_LIBS := -lpthread
test_codetab_SRC := csrc/python/codetab.c
test_release_SRC := $(CORE_SRC)
test_release_LIBS := -lpthread
# the GPU source's tests (ifeq HAVE_CUPTI below)
test_gpu_SRC := $(GPU_SRC) $(CORE_SRC)
test_gpu_CFLAGS := $(GPU_INC)
test_gpu_LIBS := -ldl -lpthread
test_gpu_merge_SRC := $(CORE_SRC) $(GPU_SRC)
test_gpu_merge_CFLAGS := $(GPU_INC)
test_gpu_merge_LIBS := -ldl -lpthread -Wl,--no-as-needed -lstdc++ -Wl,--as-needed

CTEST := core data io names kjson jsonw otlppb tmerge spawn session trace_select schedule codetab \
         release
CTEST_SAN_ONLY := tmerge session gpu_merge
ifeq ($(HAVE_CUPTI),1)
CTEST += gpu gpu_merge
endif
CTEST_BINS := $(foreach t,$(CTEST),$(if $(filter $(t),$(CTEST_SAN_ONLY)),,$(BIN)/test_$(t)) \
                                   $(BIN)/test_$(t)_san)
CTEST_DEPS := $(wildcard csrc/*/*.h tests/c/*.h) Makefile

# $(BIN)/test_X_san matches both rules; make takes the one with the shorter stem (X).
.SECONDEXPANSION:
$(BIN)/test_%: tests/c/test_%.c $$(test_$$*_SRC) $(CTEST_DEPS) | $(BIN)
	$(CC) $(CFLAGS_DEV) $(test_$*_CFLAGS) $< $(test_$*_SRC) $(test_$*_LIBS) -o $@
$(BIN)/test_%_san: tests/c/test_%.c $$(test_$$*_SRC) $(CTEST_DEPS) | $(BIN)
	$(CC) $(CFLAGS_DEV) $(SAN) $(test_$*_CFLAGS) $< $(test_$*_SRC) $(test_$*_LIBS) -o $@

# a level-G training loop through the real session and merge, for tests/py/formats/test_kineto.py
make_gpu_trace_SRC := $(CORE_SRC) $(GPU_SRC) $(IO_SRC)
$(BIN)/make_gpu_trace: tests/c/make_gpu_trace.c $(make_gpu_trace_SRC) $(CTEST_DEPS) | $(BIN)
	$(CC) $(CFLAGS_DEV) $(SAN) $(GPU_INC) $< $(make_gpu_trace_SRC) $(MSGPACK_FLAGS) \
	    $(YAJL_FLAGS) -lz -lm -ldl -lpthread -Wl,--no-as-needed -lstdc++ -Wl,--as-needed -o $@

$(BIN):
	@mkdir -p $@

ctest: $(CTEST_BINS) $(if $(HAVE_CUPTI),$(BIN)/make_gpu_trace)
	@set -e; for t in $(CTEST_BINS); do echo "$$t"; "$$t"; done
ifeq ($(HAVE_CUPTI),1)
	$(BIN)/make_gpu_trace $(BIN)/gpu_steps.xsp
else
	@echo "ctest: SKIPPED test_gpu: no CUPTI headers in $(CUDA_HOME)/include (set CUDA_HOME)"
endif

pytest:
	$(PY) -m pytest -q tests/py tests/gpu

# Benchmarks against torch.profiler (docs/performance.md). Slow: run on a quiet machine.
bench: setup
	@mkdir -p $(BIN)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Icsrc benchmarks/bench_core.c $(CORE_SRC) -lpthread \
	    -o $(BIN)/bench_core
	$(BIN)/bench_core
	$(PY) benchmarks/bench_ops.py
	$(PY) benchmarks/bench_session.py
	$(PY) benchmarks/bench_models.py
	$(PY) benchmarks/bench_modules.py
	$(PY) benchmarks/bench_size.py
	$(PY) benchmarks/bench_scale.py
	$(PY) benchmarks/bench_instr.py
	$(PY) benchmarks/bench_instr.py --modules 2000

clean:
	rm -rf build $(BIN) xsp/*.so *.egg-info

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
# with it set, tests/py/test_browser.py fails instead of skipping when chromium is missing
test: export XSP_TEST_TOOLS := 1
test: setup ctest pytest

# C unit tests, plain and under ASan + UBSan.
ctest:
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS_DEV) tests/c/test_core.c $(CORE_SRC) -lpthread -o $(BIN)/test_core
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_core.c $(CORE_SRC) -lpthread -o $(BIN)/test_core_san
	$(CC) $(CFLAGS_DEV) tests/c/test_data.c $(CORE_SRC) -lpthread -lm -o $(BIN)/test_data
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_data.c $(CORE_SRC) -lpthread -lm -o $(BIN)/test_data_san
	$(CC) $(CFLAGS_DEV) tests/c/test_io.c $(IO_SRC) csrc/core/strtab.c csrc/core/trace.c \
	    $(MSGPACK_FLAGS) $(YAJL_FLAGS) -o $(BIN)/test_io
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_io.c $(IO_SRC) csrc/core/strtab.c csrc/core/trace.c \
	    $(MSGPACK_FLAGS) $(YAJL_FLAGS) -o $(BIN)/test_io_san
	$(CC) $(CFLAGS_DEV) tests/c/test_kjson.c $(IO_SRC) csrc/core/strtab.c csrc/core/trace.c \
	    $(MSGPACK_FLAGS) $(YAJL_FLAGS) -o $(BIN)/test_kjson
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_kjson.c $(IO_SRC) csrc/core/strtab.c \
	    csrc/core/trace.c $(MSGPACK_FLAGS) $(YAJL_FLAGS) -o $(BIN)/test_kjson_san
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_session.c $(CORE_SRC) -lpthread -o $(BIN)/test_session_san
	$(CC) $(CFLAGS_DEV) tests/c/test_trace_select.c csrc/core/strtab.c csrc/core/trace.c \
	    -o $(BIN)/test_trace_select
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_trace_select.c csrc/core/strtab.c csrc/core/trace.c \
	    -o $(BIN)/test_trace_select_san
	$(CC) $(CFLAGS_DEV) tests/c/test_schedule.c $(CORE_SRC) -lpthread -o $(BIN)/test_schedule
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_schedule.c $(CORE_SRC) -lpthread \
	    -o $(BIN)/test_schedule_san
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_tmerge.c csrc/core/strtab.c csrc/core/trace.c \
	    csrc/core/tmerge.c -o $(BIN)/test_tmerge_san
	$(CC) $(CFLAGS_DEV) tests/c/test_spawn.c csrc/core/strtab.c csrc/core/trace.c \
	    csrc/core/spawn.c -o $(BIN)/test_spawn
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_spawn.c csrc/core/strtab.c csrc/core/trace.c \
	    csrc/core/spawn.c -o $(BIN)/test_spawn_san
	$(CC) $(CFLAGS_DEV) tests/c/test_names.c $(CORE_SRC) -lpthread -o $(BIN)/test_names
	$(CC) $(CFLAGS_DEV) $(SAN) tests/c/test_names.c $(CORE_SRC) -lpthread -o $(BIN)/test_names_san
	$(BIN)/test_core && $(BIN)/test_core_san && $(BIN)/test_data && $(BIN)/test_data_san && $(BIN)/test_io && $(BIN)/test_io_san
	$(BIN)/test_names && $(BIN)/test_names_san
	$(BIN)/test_kjson && $(BIN)/test_kjson_san
	$(BIN)/test_tmerge_san
	$(BIN)/test_spawn && $(BIN)/test_spawn_san
	$(BIN)/test_session_san
	$(BIN)/test_trace_select && $(BIN)/test_trace_select_san
	$(BIN)/test_schedule && $(BIN)/test_schedule_san
ifeq ($(HAVE_CUPTI),1)
	$(CC) $(CFLAGS_DEV) $(GPU_INC) tests/c/test_gpu.c $(GPU_SRC) $(CORE_SRC) \
	    -ldl -lpthread -o $(BIN)/test_gpu
	$(CC) $(CFLAGS_DEV) $(SAN) $(GPU_INC) tests/c/test_gpu.c $(GPU_SRC) $(CORE_SRC) \
	    -ldl -lpthread -o $(BIN)/test_gpu_san
	$(CC) $(CFLAGS_DEV) $(SAN) $(GPU_INC) tests/c/test_gpu_merge.c $(CORE_SRC) \
	    $(GPU_SRC) -ldl -lpthread -Wl,--no-as-needed -lstdc++ -Wl,--as-needed \
	    -o $(BIN)/test_gpu_merge_san
	$(BIN)/test_gpu && $(BIN)/test_gpu_san && $(BIN)/test_gpu_merge_san
	# a level-G training loop through the real session and merge, for tests/py/test_kineto.py
	$(CC) $(CFLAGS_DEV) $(SAN) $(GPU_INC) tests/c/make_gpu_trace.c $(CORE_SRC) $(GPU_SRC) \
	    $(IO_SRC) $(MSGPACK_FLAGS) $(YAJL_FLAGS) -ldl -lpthread -Wl,--no-as-needed -lstdc++ -Wl,--as-needed \
	    -o $(BIN)/make_gpu_trace
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

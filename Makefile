# The two commands a newcomer needs: `make run` and `make check`. Everything else is a step of those.
BUILD ?= build
ASAN_BUILD ?= build-asan
DATA ?= $(CURDIR)/.data
JOBS ?= $(shell nproc)

.PHONY: all deps build run stop check check-asan unit clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# Starts spaced on the embedded default (one host, local data dir) and runs a short demo.
run: build
	@scripts/run-demo "$(BUILD)" "$(DATA)"

stop:
	@if [ -f "$(DATA)/spaced.pid" ]; then kill "$$(cat $(DATA)/spaced.pid)" 2>/dev/null || true; rm -f "$(DATA)/spaced.pid"; fi

# Every test, then the same unit and integration tests under ASan+UBSan.
check: build
	@scripts/run-tests "$(BUILD)" "$(ASAN_BUILD)"

unit: build
	cd $(BUILD) && ctest -L unit --output-on-failure

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

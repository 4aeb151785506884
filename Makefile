# The two commands a newcomer needs: `make run` and `make check`. Everything else is a step of those.
BUILD ?= build
ASAN_BUILD ?= build-asan
DATA ?= $(CURDIR)/.data
JOBS ?= $(shell nproc)
# Warnings are errors under CI (CI=true, set by CI services) and for a developer who asks
# (make check WERROR=ON); a user's build keeps going on a newer compiler's new warning.
WERROR ?= $(if $(filter-out false 0,$(CI)),ON,OFF)
# scripts/run-tests configures the sanitizer build itself and reads this.
export SPACE_WERROR := $(WERROR)

# make install [PREFIX=/usr/local] [DESTDIR=...]: the build is configured for PREFIX (the
# installed programs find each other and /etc/space or PREFIX/etc/space there), built and
# installed with cmake --install; make uninstall [DESTDIR=...] removes what it installed
# but the configuration file.
PREFIX ?= /usr/local
DEB ?= $(BUILD)/deb

.PHONY: all deps build build-matrix run stop check check-asan unit clean install uninstall deb

all: build

deps:
	@scripts/install-deps

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPACE_WERROR=$(WERROR)

# An existing build dir is reconfigured only when WERROR differs from its cache.
build: deps $(BUILD)/CMakeCache.txt
	@grep -qx 'SPACE_WERROR:BOOL=$(WERROR)' $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DSPACE_WERROR=$(WERROR)
	cmake --build $(BUILD) -j$(JOBS)

# gcc and clang x every CMake build type, compile only, warnings as errors.
build-matrix: deps
	@scripts/build-matrix

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

install: deps
	@if [ ! -f $(BUILD)/CMakeCache.txt ] || ! grep -qx 'CMAKE_INSTALL_PREFIX:PATH=$(PREFIX)' $(BUILD)/CMakeCache.txt; then \
		cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPACE_WERROR=$(WERROR) -DCMAKE_INSTALL_PREFIX=$(PREFIX); fi
	cmake --build $(BUILD) -j$(JOBS)
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD)

# (the same DESTDIR as the install; the configuration file stays)
uninstall:
	@[ -f $(BUILD)/install_manifest.txt ] || { echo "nothing installed from $(BUILD)"; exit 1; }
	grep -v '/space/spaced\.conf$$' $(BUILD)/install_manifest.txt | sed 's|^|$(DESTDIR)|' | tr '\n' '\0' | xargs -0 rm -f

# The Debian packages space, libspace0 and libspace-dev (debian/), built by dpkg-buildpackage
# in a copy of the tree: $(DEB)/*.deb.
deb: deps
	@scripts/build-deb "$(DEB)"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-matrix

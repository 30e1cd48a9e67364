#!/usr/bin/env bash
# README command 2: install the dependencies, build every flavour and run all tests.
#   format: every C and C++ file as clang-format (.clang-format) writes it
#   fuzz  (clang + libFuzzer + ASan/UBSan): each fuzz target for ESPGW_FUZZ_SECONDS
#   tsan  (ThreadSanitizer): the threaded tests (names containing "Concurrent") and the
#         gateway driven through its control path (GatewayDynamicTest, ControlSocketTest)
#   asan  (AddressSanitizer + UndefinedBehaviorSanitizer): every test but the "timing" and
#         "charon" ones (the daemon runs under real traffic in the netns scenarios; charon's
#         scenarios add the C plugin, which runs in charon's own uninstrumented process)
#   package (Release, Debian's dpkg-buildflags, no -Werror): what is installed, then the
#         Debian package made from it, installed, run, purged (tests/install)
#   release: every test; it runs last so that ctest's summary line closes the output.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzz_seconds="${ESPGW_FUZZ_SECONDS:-20}"

step() { printf '\n=== %s ===\n' "$*"; }

step "dependencies"
bash tools/install-deps.sh

step "format (clang-format)"
if git rev-parse --git-dir >/dev/null 2>&1; then
  git ls-files -z '*.c' '*.h' '*.cpp'
else  # a source tree without git: every file outside the build directories
  find . -path ./build -prune -o -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) -print0
fi | xargs -0 clang-format --dry-run --Werror

step "fuzz build (clang, libFuzzer), ${fuzz_seconds}s per target"
cmake --preset fuzz -DESPGW_FUZZ_SECONDS="${fuzz_seconds}" >/dev/null
cmake --build build/fuzz
# Each target fuzzes on one core for its time: two at once.
ctest --test-dir build/fuzz -j2 --output-on-failure

step "ThreadSanitizer build: threaded tests"
cmake --preset tsan >/dev/null
cmake --build build/tsan --target espgw_unit_tests espgw_xfrm_tests espgw_vici_tests \
  espgw_daemon_tests espgw_gateway_dynamic_tests
# The daemon's own threads too: a real Gateway (TUN readers, workers, the SA state thread)
# driven through its control path in a private namespace.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir build/tsan -R 'Concurrent|GatewayDynamicTest|ControlSocketTest' \
  --output-on-failure --no-tests=error

step "AddressSanitizer + UndefinedBehaviorSanitizer build: all tests"
cmake --preset asan >/dev/null
cmake --build build/asan
# Tests labelled "timing" assert on timing-sensitive outcomes (TCP's view of a rekey
# under load); those labelled "charon" put the daemon behind real charons, whose plugin
# runs in charon's own process. Both run in the release build only, which keeps the
# whole suite near half an hour on two cores.
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1" \
  ctest --test-dir build/asan -LE 'timing|charon' --output-on-failure --no-tests=error

step "packagers' build: Release with dpkg-buildflags (hardening=+all), no -Werror; its Debian package"
# What a user's or a distribution's build does: no preset, so warnings are not errors
# (ESPGW_WERROR is off), Debian's compiler and linker flags (CMake reads CFLAGS, CXXFLAGS and
# LDFLAGS; CPPFLAGS go in with them, as debhelper does). Only what is installed is built,
# and the package made from it is installed, run and purged, and its unit tested under
# systemd (tests/install).
(
  export DEB_BUILD_MAINT_OPTIONS=hardening=+all
  cppflags=$(dpkg-buildflags --get CPPFLAGS)
  export CFLAGS="$(dpkg-buildflags --get CFLAGS) $cppflags"
  export CXXFLAGS="$(dpkg-buildflags --get CXXFLAGS) $cppflags"
  export LDFLAGS="$(dpkg-buildflags --get LDFLAGS)"
  cmake -S . -B build/package -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DESPGW_BUILD_TESTS=OFF -DESPGW_BUILD_BENCH=OFF >/dev/null
)
cmake --build build/package
bash tests/install/package_install.sh build/package
bash tests/install/systemd_unit.sh build/package || (($? == 77))

step "release build: all tests"
cmake --preset release >/dev/null
cmake --build build/release
ctest --test-dir build/release --output-on-failure --no-tests=error

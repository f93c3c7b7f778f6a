#!/usr/bin/env bash
# install_consumer.sh BUILD_DIR CONSUMER_SOURCE_DIR GENERATOR CXX CXX_FLAGS LINKER_FLAGS
#                     C_CONSUMER_SOURCE_DIR CC C_FLAGS
#
# Installs BUILD_DIR into a temporary prefix and checks the installed tree the way a user would:
# an out-of-tree CMake project (find_package(capsule), capsule::runtime) configures, builds and
# runs; the same program compiles and runs with `pkg-config --cflags --libs capsule`; the C API
# example (C_CONSUMER_SOURCE_DIR, examples/c_embed) builds as C with find_package(capsule) and
# capsule::c, and with `pkg-config capsule-c`, and runs its model from outside the prefix (the
# installed libcapsule_c finds the installed plugins); the installed `capsule` finds the installed
# plugins (`plugins`, `plan --ops relu`) and its ONNX import module (`plan mlp.onnx`).
set -euo pipefail
build=$1 consumer=$2 generator=$3 cxx=$4 cxx_flags=$5 linker_flags=$6
c_consumer=$7 cc=$8 c_flags=$9
work=$(mktemp -d "${TMPDIR:-/tmp}/capsule-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
unset CAPSULE_PLUGIN_PATH

fail() { echo "install_consumer: $*" >&2; exit 1; }
expect() {  # expect WHAT PATTERN TEXT
    grep -Eq -- "$2" <<<"$3" || { printf '%s\n' "$3"; fail "$1: expected /$2/"; }
}
run_ok() {  # run_ok COMMAND...: sets $out to its stdout and stderr; a non-zero exit fails with both
    local rc=0
    out=$("$@" 2>&1) || rc=$?
    [ "$rc" = 0 ] || { printf '%s\n' "$out"; fail "$* exited with $rc"; }
}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install failed"; }
for f in include/capsule/session.hpp include/capsule/plugin_abi.h bin/capsule lib/capsule/plugins/reference.capsule.json \
         lib/cmake/capsule/capsuleConfig.cmake lib/cmake/capsule/capsuleConfigVersion.cmake lib/pkgconfig/capsule.pc \
         share/capsule/profiles include/capsule/capsule.h lib/libcapsule_c.so lib/pkgconfig/capsule-c.pc; do
    [ -e "$prefix/$f" ] || fail "$f is not installed"
done
for f in include/capsule/training.hpp include/capsule/fashion_mnist.hpp; do
    [ ! -e "$prefix/$f" ] || fail "$f is installed, but training is not part of the libraries"
done

# An out-of-tree CMake consumer.
cmake -S "$consumer" -B "$work/consumer" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="$cxx_flags" -DCMAKE_EXE_LINKER_FLAGS="$linker_flags" \
      -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "the consumer does not configure"; }
cmake --build "$work/consumer" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "the consumer does not build"; }
run_ok "$work/consumer/capsule_embed"
expect "capsule_embed (CMake consumer)" 'capsule reference\.relu' "$out"
expect "capsule_embed (CMake consumer)" '^output: ' "$out"
echo "CMake consumer: ok"

# The same program through pkg-config.
if command -v pkg-config >/dev/null 2>&1; then
    flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs capsule)
    # shellcheck disable=SC2086
    "$cxx" -std=c++20 $cxx_flags $linker_flags "$consumer/embed.cpp" -o "$work/embed_pc" $flags \
        || fail "embed.cpp does not build with pkg-config's flags: $flags"
    run_ok "$work/embed_pc" "$prefix/lib/capsule/plugins"
    expect "capsule_embed (pkg-config)" '^output: ' "$out"
    echo "pkg-config consumer: ok"
fi

# The C API example, a C program: its model's output, or (a library built without ONNX) the
# status saying so.
check_c_embed() {  # check_c_embed WHAT PROGRAM
    local rc=0
    out=$("$2" "$c_consumer/mlp.onnx" 2>&1) || rc=$?
    if grep -q "built without ONNX support" <<<"$out"; then return; fi
    [ "$rc" = 0 ] || { printf '%s\n' "$out"; fail "$1 exited with $rc"; }
    expect "$1" '"status": "accepted"' "$out"
    expect "$1" '^output probs float32 \[2, 3\]: 0\.16' "$out"
}
cmake -S "$c_consumer" -B "$work/c_consumer" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$c_flags" -DCMAKE_EXE_LINKER_FLAGS="$linker_flags" \
      -DCMAKE_BUILD_TYPE=Release >"$work/c_configure.log" 2>&1 || { cat "$work/c_configure.log"; fail "the C consumer does not configure"; }
cmake --build "$work/c_consumer" >"$work/c_build.log" 2>&1 || { cat "$work/c_build.log"; fail "the C consumer does not build"; }
check_c_embed "c_embed (CMake consumer)" "$work/c_consumer/c_embed"
echo "C API CMake consumer: ok"
if command -v pkg-config >/dev/null 2>&1; then
    flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs capsule-c)
    # shellcheck disable=SC2086
    "$cc" -std=c99 $c_flags $linker_flags "$c_consumer/main.c" -o "$work/c_embed_pc" $flags -lm -Wl,-rpath,"$prefix/lib" \
        || fail "main.c does not build with pkg-config's flags: $flags"
    check_c_embed "c_embed (pkg-config)" "$work/c_embed_pc"
    echo "C API pkg-config consumer: ok"
fi

# The installed tool finds the installed plugins relative to its own directory.
run_ok "$prefix/bin/capsule" plugins
expect "capsule plugins" "reference.*available" "$out"
expect "capsule plugins" "$prefix/lib/capsule/plugins/reference\.capsule\.json" "$out"
run_ok "$prefix/bin/capsule" plan --ops relu
expect "capsule plan --ops relu" 'reference\.relu' "$out"
# ... and its ONNX import module (lib/capsule/libcapsule_onnx_import.so), when the build has one.
if [ -e "$build/bin/libcapsule_onnx_import.so" ]; then
    [ -e "$prefix/lib/capsule/libcapsule_onnx_import.so" ] || fail "the ONNX import module is not installed"
    run_ok "$prefix/bin/capsule" plan --profile checked_cpu "$c_consumer/mlp.onnx"
    expect "capsule plan mlp.onnx" 'reference\.linear' "$out"
fi
echo "installed capsule: ok"

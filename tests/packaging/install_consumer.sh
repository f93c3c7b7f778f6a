#!/usr/bin/env bash
# install_consumer.sh BUILD_DIR CONSUMER_SOURCE_DIR GENERATOR CXX CXX_FLAGS LINKER_FLAGS
#
# Installs BUILD_DIR into a temporary prefix and checks the installed tree the way a user would:
# an out-of-tree CMake project (find_package(capsule), capsule::runtime) configures, builds and
# runs; the same program compiles and runs with `pkg-config --cflags --libs capsule`; the
# installed `capsule` finds the installed plugins (`plugins`, `plan --ops relu`).
set -euo pipefail
build=$1 consumer=$2 generator=$3 cxx=$4 cxx_flags=$5 linker_flags=$6
work=$(mktemp -d "${TMPDIR:-/tmp}/capsule-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
unset CAPSULE_PLUGIN_PATH

fail() { echo "install_consumer: $*" >&2; exit 1; }
expect() {  # expect WHAT PATTERN TEXT
    grep -Eq -- "$2" <<<"$3" || { printf '%s\n' "$3"; fail "$1: expected /$2/"; }
}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install failed"; }
for f in include/capsule/session.hpp include/capsule/plugin_abi.h bin/capsule lib/capsule/plugins/reference.capsule.json \
         lib/cmake/capsule/capsuleConfig.cmake lib/cmake/capsule/capsuleConfigVersion.cmake lib/pkgconfig/capsule.pc \
         share/capsule/profiles; do
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
out=$("$work/consumer/capsule_embed")
expect "capsule_embed (CMake consumer)" 'capsule reference\.relu' "$out"
expect "capsule_embed (CMake consumer)" '^output: ' "$out"
echo "CMake consumer: ok"

# The same program through pkg-config.
if command -v pkg-config >/dev/null 2>&1; then
    flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs capsule)
    # shellcheck disable=SC2086
    "$cxx" -std=c++20 $cxx_flags $linker_flags "$consumer/embed.cpp" -o "$work/embed_pc" $flags \
        || fail "embed.cpp does not build with pkg-config's flags: $flags"
    out=$("$work/embed_pc" "$prefix/lib/capsule/plugins")
    expect "capsule_embed (pkg-config)" '^output: ' "$out"
    echo "pkg-config consumer: ok"
fi

# The installed tool finds the installed plugins relative to its own directory.
out=$("$prefix/bin/capsule" plugins)
expect "capsule plugins" "reference.*available" "$out"
expect "capsule plugins" "$prefix/lib/capsule/plugins/reference\.capsule\.json" "$out"
out=$("$prefix/bin/capsule" plan --ops relu)
expect "capsule plan --ops relu" 'reference\.relu' "$out"
echo "installed capsule: ok"

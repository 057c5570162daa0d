#!/bin/sh
# The installed kvfold as an embedder sees it: `cmake --install` into a
# temporary prefix, the exported symbols of libkvfold.so, then embed.c built
# through pkg-config against the shared library (run with LD_LIBRARY_PATH)
# and against the static one (pkg-config --static), and run on MODELs.
# usage: install_test.sh CMAKE BUILD_DIR WORK_DIR LIBDIR CC PKG_CONFIG VERSION [MODEL...]
set -eu
cmake=$1 build=$2 work=$3 libdir=$4 cc=$5 pkg_config=$6 version=$7
shift 7
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
for f in include/kvfold.h "$libdir/libkvfold.a" "$libdir/libkvfold.so" "$libdir/libkvfold.so.0" \
         "$libdir/pkgconfig/kvfold.pc" bin/kvfold; do
    [ -e "$prefix/$f" ] || fail "$f not installed"
done
"$prefix/bin/kvfold" --version | grep -q "$version" || fail "installed CLI does not run"

# Only the public API is exported.
nm -D --defined-only "$prefix/$libdir/libkvfold.so.0" | awk '{print $NF}' >"$work/exports.txt"
n_kvf=$(grep -c '^kvf_' "$work/exports.txt" || true)
if grep -v '^kvf_' "$work/exports.txt" >"$work/extra.txt"; then
    cat "$work/extra.txt" >&2
    fail "libkvfold.so exports symbols outside the kvf_ API"
fi
[ "$n_kvf" -gt 0 ] || fail "libkvfold.so exports nothing"
echo "install_test: libkvfold.so exports $n_kvf symbols, all kvf_*"

PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
[ "$("$pkg_config" --modversion kvfold)" = "$version" ] || fail "pkg-config --modversion kvfold"
cflags=$("$pkg_config" --cflags kvfold)
warn="-std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wpedantic -Werror"

# Shared: the .so of the prefix, found through LD_LIBRARY_PATH.
libs=$("$pkg_config" --libs kvfold)
echo "install_test: $cc $cflags $libs"
# shellcheck disable=SC2086
"$cc" $warn $cflags "$here/embed.c" -o "$work/embed_shared" $libs -lm || fail "shared build"
LD_LIBRARY_PATH="$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$work/embed_shared" |
    grep -q "$prefix/$libdir/libkvfold.so.0" || fail "embed_shared does not load the installed libkvfold.so.0"
LD_LIBRARY_PATH="$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/embed_shared" "$@" ||
    fail "embed_shared"

# Static: the same flags with --static; -lkvfold names libkvfold.a, since
# the linker would otherwise prefer the .so beside it.
libs=$("$pkg_config" --static --libs kvfold | sed 's/-lkvfold\b/-l:libkvfold.a/')
echo "install_test: $cc $cflags $libs"
# shellcheck disable=SC2086
"$cc" $warn $cflags "$here/embed.c" -o "$work/embed_static" $libs -lm || fail "static build"
if readelf -d "$work/embed_static" | grep -q 'libkvfold'; then
    fail "embed_static depends on libkvfold.so"
fi
"$work/embed_static" "$@" || fail "embed_static"
echo "install_test: ok"

#!/usr/bin/env bash
# Builds the API reference (docs/Doxyfile.in over api/ffpa.h) into OUTDIR;
# fails on any undocumented public symbol or documentation error; exit 77
# (skip) where doxygen is not installed. Usage: api_docs.sh SRCDIR OUTDIR VERSION
set -u
src=$1 out=$2 version=$3
command -v doxygen >/dev/null || { echo "doxygen not installed (Debian: doxygen)"; exit 77; }
mkdir -p "$out"
sed -e "s|@SRCDIR@|$src|" -e "s|@OUTDIR@|$out|" -e "s|@VERSION@|$version|" "$src/docs/Doxyfile.in" >"$out/Doxyfile"
doxygen "$out/Doxyfile" 2>"$out/warnings.txt"
rc=$?
cat "$out/warnings.txt"
[ $rc -eq 0 ] && [ ! -s "$out/warnings.txt" ] && echo "API reference: $out/html/index.html"

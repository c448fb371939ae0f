#!/usr/bin/env bash
# Runs one golden scenario through the real `topo` binary and compares its
# standard output, standard error (when the case pins it) and exit status
# with the reviewed expectations. UPDATE_GOLDEN=1 rewrites the expectations.
#
#   run_case.sh TOPO_BINARY CASE_DIR
#
# CASE_DIR/cmd holds the arguments (one line, shell words); it runs with
# tests/golden/data as the working directory.
set -uo pipefail
topo=$1
case_dir="$(cd "$2" && pwd)"
data_dir="$(cd "$(dirname "$0")/data" && pwd)"
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
args=$(cat "$case_dir/cmd")
# Cases on the real shared data (crux-847, the Kalos trace) skip without it.
if grep -qE 'crux-847|TOPO_SHARED_DIR' "$case_dir/cmd" &&
   [ ! -d "${TOPO_SHARED_DIR:-/nonexistent}/data" ]; then
  echo "skipped: shared data not found (set TOPO_SHARED_DIR)"
  exit 77
fi
stdin=/dev/null
[ -f "$case_dir/stdin" ] && stdin="$case_dir/stdin"
(cd "$data_dir" && eval "\"$topo\" $args" <"$stdin" >"$out" 2>"$err")
rc=$?
if [ "${UPDATE_GOLDEN:-0}" = "1" ]; then
  cp "$out" "$case_dir/expected.out"
  echo "$rc" >"$case_dir/expected.rc"
  if [ -s "$err" ]; then cp "$err" "$case_dir/expected.err"; else rm -f "$case_dir/expected.err"; fi
  echo "updated $case_dir"
  exit 0
fi
status=0
want_rc=$(cat "$case_dir/expected.rc")
if [ "$rc" != "$want_rc" ]; then
  echo "exit status $rc, expected $want_rc"
  status=1
fi
if ! diff -u "$case_dir/expected.out" "$out"; then status=1; fi
if [ -f "$case_dir/expected.err" ] && ! diff -u "$case_dir/expected.err" "$err"; then status=1; fi
exit $status

#!/usr/bin/env bash
# warm.sh: compiles, at the lowest CPU priority, what the later phases of
# `make test` will compile, while the earlier ones wait on something else
# (apt-get and downloads in setup, services starting in up, the black-box
# cases waiting out a 180 s visibility timeout in test-unit). On a fresh
# machine the Go build cache is cold, and every build configuration (tests,
# -race, fuzz instrumentation) and staticcheck's own cache start from
# nothing; a phase that finds its work done here skips it.
#
# It only fills caches: every phase still builds and runs for itself and
# fails on its own. Same session as make (nice applies inside one
# autogroup), so the phases' processes keep the CPU they ask for.
#
# Usage: warm.sh RACE_PKGS...   (make test starts it and kills it at its end)
set -uo pipefail
cd "$(dirname "$0")/.."
log=.local/warm.log
mkdir -p .local
: >"$log"
child=
trap '[ -n "$child" ] && kill "$child" 2>/dev/null; exit 0' TERM INT

step() {
  local t0=$SECONDS
  "$@" >>"$log" 2>&1 &
  child=$!
  wait "$child"
  child=
  echo "warm: $* ($((SECONDS - t0))s)" >>"$log"
}

# Every test binary test-unit links (-exec true: built, never run).
step go test -count=1 -exec /bin/true ./...
# What lint's vet and staticcheck read.
step go vet ./...
[ -x .local/bin/staticcheck ] && step .local/bin/staticcheck ./...
# The race detector's build of the packages test-race runs.
step go test -race -short -count=1 -exec /bin/true "$@"
# The fuzz-instrumented build of each package with a fuzzer.
for f in $(grep -rl --include='*_test.go' '^func Fuzz' internal cmd | xargs -n1 dirname | sort -u); do
  name=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$f"/*_test.go | head -n1 | cut -c6-)
  step go test -run '^$' -fuzz "^$name\$" -fuzztime 1x -exec /bin/true "./$f"
done
echo "warm: done" >>"$log"

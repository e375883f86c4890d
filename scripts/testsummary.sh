#!/usr/bin/env bash
# Reads the go test -json stream gotestsum saved and prints what make test
# promises at its end: the lines tests marked as summaries ("SUMMARY ..."),
# every skipped test with its reason, and one closing line
# "tests: N passed, N failed, N skipped". With CI set a skipped test fails
# the run: a skip in CI is a check that did not run.
set -euo pipefail
json=${1:?usage: testsummary.sh FILE.json}
count() { grep -c "\"Action\":\"$1\",\"Package\":\"[^\"]*\",\"Test\":" "$json" || true; }
passed=$(count pass); failed=$(count fail); skipped=$(count skip)
# Lines a test prints with the SUMMARY prefix (the chaos run's fault counts).
grep -o '"Output":"SUMMARY [^"]*' "$json" | sed 's/^"Output":"SUMMARY /  /; s/\\n$//; s/\\t/\t/g' || true
if [ "$skipped" -gt 0 ]; then
  echo "skipped tests:"
  grep "\"Action\":\"skip\",\"Package\":\"[^\"]*\",\"Test\":" "$json" |
    sed -E 's/.*"Package":"([^"]*)","Test":"([^"]*)".*/  \1 \2/'
fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
if [ -n "${CI:-}" ] && [ "$skipped" -gt 0 ]; then
  echo "CI: $skipped test(s) skipped; a skip in CI is a check that did not run" >&2
  exit 1
fi

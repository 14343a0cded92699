#!/usr/bin/env bash
# Run the whole suite as two pytest processes at once: the engine modules (Docker and Ray; one process, in file
# order, as they share the engine, its images and Ray's ports) and every other test (no engine: tests/conftest.py).
# The engine half prints as it goes; the other half's output follows when it ends. Extra arguments go to both.
# Exit status: the engine half's if it failed, else the other half's (5: no test collected).
set -uo pipefail
cd "$(dirname "$0")/.."

py=.venv/bin/python
rest_log=$(mktemp -t pinpoint-tests-rest.XXXXXX)
"$py" -m pytest -q -m "not engine" -p no:cacheprovider "$@" > "$rest_log" 2>&1 &
rest=$!
"$py" -m pytest -q -m engine "$@" &
engine=$!
# Ctrl-C or CI's kill stops both halves and leaves no log behind
trap 'kill "$rest" "$engine" 2>/dev/null; wait; rm -f "$rest_log"; exit 130' INT TERM

wait "$rest"
rest_rc=$?
echo
echo "==== the tests outside the engine modules (pytest -m 'not engine'): exit $rest_rc ===="
cat "$rest_log"
rm -f "$rest_log"
echo "==== end of the tests outside the engine modules; the engine modules go on ===="
wait "$engine"
engine_rc=$?
echo "pinpoint tests: engine modules exit $engine_rc, the others exit $rest_rc"
if [ "$engine_rc" -ne 0 ]; then
  exit "$engine_rc"
fi
exit "$rest_rc"

#!/usr/bin/env bash
# The test command of the README and of CI: the whole suite on the shipped fixture set
# (tests/fixtures, or SAILFISH_FIXTURES), then again on a second set of other sizes that
# tests/make_fixture.py writes to a temporary folder (no goldens there: parity tests skip).
# Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

"$PYTHON" -m pytest tests -q "$@"

alt="$(mktemp -d)"
trap 'rm -rf "$alt"' EXIT
"$PYTHON" tests/make_fixture.py "$alt" > /dev/null
echo "--- again on the alternate fixture set (tests/make_fixture.py)"
SAILFISH_FIXTURES="$alt" "$PYTHON" -m pytest tests -q "$@"

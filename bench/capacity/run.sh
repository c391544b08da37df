#!/usr/bin/env bash
# Compares capacity gates on a real HTTP server under vegeta, over
# loopback: no gate, a fixed gate set right, one set four times too high,
# and the adaptive gate, each at half, once, twice and four times the
# handler's capacity. Takes about three minutes; writes RESULTS.md beside
# this script. Extra arguments go to the program (go run . -h lists them).
set -euo pipefail
cd "$(dirname "$0")"
exec go run . -out RESULTS.md "$@"

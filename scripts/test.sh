#!/usr/bin/env bash
# Runs every check on every Go module in the repository: gofmt, go vet,
# staticcheck, the tests under the race detector, and each benchmark once so
# that they keep compiling and running, then the consumer check
# (scripts/check/consumercheck): every released module installs with go get
# at the version in VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."

staticcheck="honnef.co/go/tools/cmd/staticcheck@v0.8.2"

unformatted=$(gofmt -l $(find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi

for mod in $(find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' | sort); do
	dir=$(dirname "$mod")
	echo "== $dir"
	(
		cd "$dir"
		go vet ./...
		go run "$staticcheck" ./...
		go test -race -count=1 ./...
		go test -run '^$' -bench . -benchtime 1x ./...
	)
done
echo "== consumer check"
go -C scripts/check run ./consumercheck -root "$PWD"
echo "all checks passed"

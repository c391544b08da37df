#!/usr/bin/env bash
# Runs every check of the repository: gofmt, then in each Go module go vet,
# staticcheck, the tests under the race detector and each benchmark once
# (so that they keep compiling and running), then the consumer check
# (scripts/check/consumercheck: every released module installs with go get
# at the version in VERSION, with lean module graphs).
#
# Usage:
#
#	scripts/test.sh                     everything (what CI runs)
#	scripts/test.sh ./grpclimit ./limitsprom
#	                                    the modules in these directories only
#	scripts/test.sh consumer            the consumer check only
#
# Environment:
#
#	LIMITS_QUICK=1        tests without the race detector, no benchmarks, no
#	                      consumer check: the quick loop while editing
#	LIMITS_NO_RACE=1      tests without the race detector
#	LIMITS_NO_BENCH=1     no benchmarks
#	LIMITS_NO_CONSUMER=1  no consumer check
#	LIMITS_REQUIRE_REDIS=1
#	                      the Redis tests fail, rather than skip, without a
#	                      redis-server (CI sets it)
#	STATICCHECK=path      a staticcheck binary to use; by default
#	                      staticcheck v0.8.2, from PATH or $(go env GOPATH)/bin
#	                      if that is the version there, else installed once
#	                      with go install into $LIMITS_TOOLS (default: a
#	                      directory in the Go build cache) and reused
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

staticcheck_version=0.8.2
if [ "${LIMITS_QUICK:-}" = 1 ]; then
	LIMITS_NO_RACE=1 LIMITS_NO_BENCH=1 LIMITS_NO_CONSUMER=1
fi

# The modules to check, and whether to run the consumer check.
mods=()
consumer=1
if [ $# -gt 0 ]; then
	consumer=0
	for arg in "$@"; do
		if [ "$arg" = consumer ]; then
			consumer=1
			continue
		fi
		dir=${arg%/}
		dir=./${dir#./}
		if [ ! -f "$dir/go.mod" ]; then
			echo "test.sh: $arg is not a module's directory (no go.mod)" >&2
			exit 2
		fi
		mods+=("$dir")
	done
else
	while IFS= read -r mod; do
		mods+=("$(dirname "$mod")")
	done < <(find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' | sort)
fi
if [ "${LIMITS_NO_CONSUMER:-}" = 1 ]; then
	consumer=0
fi

run_staticcheck() {
	if [ -z "${STATICCHECK:-}" ]; then
		for c in "$(command -v staticcheck || true)" "$(go env GOPATH)/bin/staticcheck"; do
			if [ -x "$c" ] && "$c" -version 2>/dev/null | grep -q "($staticcheck_version)"; then
				STATICCHECK=$c
				break
			fi
		done
		if [ -z "${STATICCHECK:-}" ]; then
			tools=${LIMITS_TOOLS:-$(go env GOCACHE)/limits-tools}/staticcheck-v$staticcheck_version
			if [ ! -x "$tools/staticcheck" ]; then
				echo "installing staticcheck v$staticcheck_version into $tools"
				GOBIN=$tools GOFLAGS= go install "honnef.co/go/tools/cmd/staticcheck@v$staticcheck_version"
			fi
			STATICCHECK=$tools/staticcheck
		fi
	fi
	"$STATICCHECK" "$@"
}

start=$SECONDS
if [ ${#mods[@]} -gt 0 ]; then
	# gofmt over the modules' directories (nested modules included).
	unformatted=$(find "${mods[@]}" -name '*.go' -not -path '*/.git/*' -print0 | xargs -0 gofmt -l | sort -u)
	if [ -n "$unformatted" ]; then
		echo "gofmt would change:" >&2
		echo "$unformatted" >&2
		exit 1
	fi
fi

race=-race
if [ "${LIMITS_NO_RACE:-}" = 1 ]; then
	race=
fi
times=()
for dir in "${mods[@]}"; do
	echo "== $dir"
	t0=$SECONDS
	(
		cd "$dir"
		go vet ./...
		run_staticcheck ./...
		go test $race -count=1 ./...
		if [ "${LIMITS_NO_BENCH:-}" != 1 ]; then
			go test -run '^$' -bench . -benchtime 1x ./...
		fi
	)
	times+=("$(printf '%4ds  %s' $((SECONDS - t0)) "$dir")")
done
if [ "$consumer" = 1 ]; then
	echo "== consumer check"
	t0=$SECONDS
	go -C scripts/check run ./consumercheck -root "$root"
	times+=("$(printf '%4ds  %s' $((SECONDS - t0)) "consumer check")")
fi
echo "== times"
printf '%s\n' "${times[@]}"
printf '%4ds  total\n' $((SECONDS - start))
echo "all checks passed"

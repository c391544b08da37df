#!/usr/bin/env bash
# Runs every check of the repository: gofmt, then in each Go module go vet,
# staticcheck, the tests under the race detector and each benchmark once
# (so that they keep compiling and running), then the consumer check
# (scripts/check/consumercheck: every released module installs with go get
# at the version in VERSION, with lean module graphs). A check that fails
# does not stop the others: each step of each module runs, and the run
# ends with the list of the steps that failed (module and step), and
# exits 1 if any did.
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
#	LIMITSTEST_QUICK=1        tests without the race detector, no benchmarks,
#	                          no consumer check: the quick loop while editing
#	LIMITSTEST_NO_RACE=1      tests without the race detector
#	LIMITSTEST_NO_BENCH=1     no benchmarks
#	LIMITSTEST_NO_CONSUMER=1  no consumer check
#	LIMITSTEST_REQUIRE_REDIS=1
#	                          the Redis tests fail, rather than skip, without
#	                          a redis-server (CI sets it)
#	STATICCHECK=path          a staticcheck binary to use; by default
#	                          staticcheck v0.8.2, from PATH or
#	                          $(go env GOPATH)/bin if that is the version
#	                          there, else installed once with go install into
#	                          $LIMITSTEST_TOOLS (default: a directory in the
#	                          Go build cache) and reused
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# Interrupted, the run stops, rather than going on to the next check.
trap 'echo "test.sh: interrupted" >&2; exit 130' INT TERM

staticcheck_version=0.8.2
if [ "${LIMITSTEST_QUICK:-}" = 1 ]; then
	LIMITSTEST_NO_RACE=1 LIMITSTEST_NO_BENCH=1 LIMITSTEST_NO_CONSUMER=1
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
if [ "${LIMITSTEST_NO_CONSUMER:-}" = 1 ]; then
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
			tools=${LIMITSTEST_TOOLS:-$(go env GOCACHE)/limits-tools}/staticcheck-v$staticcheck_version
			if [ ! -x "$tools/staticcheck" ]; then
				echo "installing staticcheck v$staticcheck_version into $tools"
				GOBIN=$tools GOFLAGS= go install "honnef.co/go/tools/cmd/staticcheck@v$staticcheck_version" || return
			fi
			STATICCHECK=$tools/staticcheck
		fi
	fi
	"$STATICCHECK" "$@"
}

# The steps that failed, as "module: step".
failures=()

# step runs the command that follows dir and name in the module's
# directory dir, and records "dir: name" among the failures if it fails.
step() {
	local dir=$1 name=$2
	shift 2
	if ! (cd "$dir" && "$@"); then
		echo "-- FAIL: $dir: $name" >&2
		failures+=("$dir: $name")
	fi
}

start=$SECONDS
if [ ${#mods[@]} -gt 0 ]; then
	# gofmt over the modules' directories (nested modules included).
	echo "== gofmt"
	if ! unformatted=$(find "${mods[@]}" -name '*.go' -not -path '*/.git/*' -print0 | xargs -0 gofmt -l | sort -u); then
		echo "-- FAIL: gofmt" >&2
		failures+=("gofmt")
	elif [ -n "$unformatted" ]; then
		echo "gofmt would change:" >&2
		echo "$unformatted" >&2
		failures+=("gofmt: would change ${unformatted//$'\n'/ }")
	fi
fi

race=-race
if [ "${LIMITSTEST_NO_RACE:-}" = 1 ]; then
	race=
fi
times=()
for dir in "${mods[@]}"; do
	echo "== $dir"
	t0=$SECONDS
	failed=${#failures[@]}
	step "$dir" vet go vet ./...
	step "$dir" staticcheck run_staticcheck ./...
	step "$dir" tests go test $race -count=1 ./...
	if [ "${LIMITSTEST_NO_BENCH:-}" != 1 ]; then
		step "$dir" benchmarks go test -run '^$' -bench . -benchtime 1x ./...
	fi
	mark=
	if [ ${#failures[@]} -gt "$failed" ]; then
		mark="  (failed)"
	fi
	times+=("$(printf '%4ds  %s%s' $((SECONDS - t0)) "$dir" "$mark")")
done
if [ "$consumer" = 1 ]; then
	echo "== consumer check"
	t0=$SECONDS
	mark=
	if ! go -C scripts/check run ./consumercheck -root "$root"; then
		echo "-- FAIL: consumer check" >&2
		failures+=("consumer check")
		mark="  (failed)"
	fi
	times+=("$(printf '%4ds  %s%s' $((SECONDS - t0)) "consumer check" "$mark")")
fi
echo "== times"
if [ ${#times[@]} -gt 0 ]; then
	printf '%s\n' "${times[@]}"
fi
printf '%4ds  total\n' $((SECONDS - start))
if [ ${#failures[@]} -gt 0 ]; then
	echo "== failures"
	printf '%s\n' "${failures[@]}"
	echo "${#failures[@]} failed"
	exit 1
fi
echo "all checks passed"

#!/usr/bin/env bash
# Sets, in every go.mod of the repository, the required version of each of
# the repository's own modules to the version in VERSION (see
# docs/RELEASING.md). The replace lines keep the builds on the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(tr -d '[:space:]' < VERSION)
find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' | sort | while IFS= read -r f; do
	grep -v '=>' "$f" |
		sed -n 's#^[[:space:]]*\(require[[:space:]]\{1,\}\)\{0,1\}\(github\.com/limitsgo/limits[^[:space:]]*\)[[:space:]]\{1,\}v[^[:space:]]*.*#\2#p' |
		while IFS= read -r path; do
			go mod edit -require="$path@$version" "$f"
		done
done

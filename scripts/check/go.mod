module github.com/limitsgo/limits/scripts/check

go 1.26.0

require golang.org/x/mod v0.41.0

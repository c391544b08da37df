module github.com/limitsgo/limits/scripts/check

go 1.26.0

require (
	golang.org/x/mod v0.41.0
	golang.org/x/tools v0.49.0
)

require golang.org/x/sync v0.22.0 // indirect

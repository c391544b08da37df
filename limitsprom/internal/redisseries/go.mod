module github.com/limitsgo/limits/limitsprom/internal/redisseries

go 1.26.0

// Modules of this repository: required at the repository's version
// (VERSION), built from the working tree here.
require (
	github.com/limitsgo/limits v0.1.0 // indirect
	github.com/limitsgo/limits/limitsprom/internal/series v0.1.0
	github.com/limitsgo/limits/redislimit v0.1.0
)

replace (
	github.com/limitsgo/limits => ../../..
	github.com/limitsgo/limits/limitsprom/internal/series => ../series
	github.com/limitsgo/limits/redislimit => ../../../redislimit
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

module github.com/limitsgo/limits/redislimit

go 1.26.0

// Modules of this repository: required at the repository's version
// (VERSION), built from the working tree here.
require github.com/limitsgo/limits v0.2.0

replace github.com/limitsgo/limits => ../

require github.com/redis/go-redis/v9 v9.23.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

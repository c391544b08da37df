module github.com/limitsgo/limits/bench

go 1.26.0

replace github.com/limitsgo/limits => ../

replace github.com/limitsgo/limits/redislimit => ../redislimit

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/limitsgo/limits/redislimit v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/limitsgo/limits v0.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

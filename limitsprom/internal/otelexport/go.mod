module github.com/limitsgo/limits/limitsprom/internal/otelexport

go 1.26.0

// Modules of this repository: required at the repository's version
// (VERSION), built from the working tree here.
require (
	github.com/limitsgo/limits v0.1.0 // indirect
	github.com/limitsgo/limits/limitsprom/internal/series v0.1.0
)

replace (
	github.com/limitsgo/limits => ../../..
	github.com/limitsgo/limits/limitsprom/internal/series => ../series
)

require (
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/metric v1.47.0
)

require github.com/cespare/xxhash/v2 v2.3.0 // indirect

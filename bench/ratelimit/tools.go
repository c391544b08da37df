//go:build tools

package ratelimit

// The commands the tests build: envoyproxy/ratelimit's, from the module
// proxy, and this repository's service, required here so that go.mod
// pins their versions and holds their dependencies.
import (
	_ "github.com/envoyproxy/ratelimit/src/client_cmd"
	_ "github.com/envoyproxy/ratelimit/src/service_cmd"
	_ "github.com/limitsgo/limits/ratelimit/cmd/limits-ratelimit"
)

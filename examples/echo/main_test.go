package main

import (
	"testing"

	"github.com/limitsgo/limits/internal/routertest"
)

// The router, served on loopback, refuses a client over the login policy
// and then over the service-wide rate, with 429, the refusing policy's
// fields and Retry-After; a refused login costs nothing in the service-wide
// bucket, and the health probe passes throughout.
func TestRouterLimits(t *testing.T) { routertest.RouterLimits(t, newRouter) }

// An event stream gives its place in the gate back once started: while it
// is open, the gate has none in flight.
func TestStreamReleasesCapacity(t *testing.T) { routertest.StreamReleasesCapacity(t, newRouter) }

//go:build !amd64

package limits

// prefetch does nothing where no assembly asks the processor to prefetch.
func prefetch(uintptr) {}

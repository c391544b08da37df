package bench

import (
	"fmt"
	"math/rand/v2"
)

// NumKeys is the number of distinct keys the benchmarks and the memory
// program use.
const NumKeys = 1_000_000

// Keys returns n distinct keys like "client-000123" (n <= NumKeys, 13 bytes
// each) in a pseudo-random order fixed by a constant seed. With n ==
// NumKeys they are the keys, in the same order, of the benchmarks of package
// limits.
//
// The bytes of all the keys lie in one block, in the order of the returned
// slice, so a loop that walks the slice allocates nothing and reads the keys
// from memory in sequence: what it measures is the structure it feeds, not
// cache misses on the keys. Structures that keep keys should be given copies
// (strings.Clone), as a server's table keeps the strings of the requests
// that first used them.
func Keys(n int) []string {
	if n < 0 || n > NumKeys {
		panic(fmt.Sprintf("bench: want 0 to %d keys, got %d", NumKeys, n))
	}
	const width = len("client-000000")
	order := rand.New(rand.NewPCG(42, 42)).Perm(n)
	buf := make([]byte, 0, n*width)
	for _, i := range order {
		buf = fmt.Appendf(buf, "client-%06d", i)
	}
	block := string(buf)
	keys := make([]string, n)
	for i := range keys {
		keys[i], block = block[:width], block[width:]
	}
	return keys
}

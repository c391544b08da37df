// Command memory fills one of the structures of package bench with
// 1,000,000 keys and prints, as one line of JSON, the heap the structure
// holds after a garbage collection.
//
//	go run ./cmd/memory MutexMap
//
// Each key is passed as a fresh copy, as a server passes the key of each
// request, so a structure that keeps its keys is charged for them and one
// that keeps only hashes is not. Run it once per structure, each in its own
// process, so that nothing but the structure is counted; cmd/report does.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/limitsgo/limits/bench"
)

// Result is the line the command prints.
type Result struct {
	// Structure is the structure's name.
	Structure string `json:"structure"`
	// Keys is the number of keys filled in.
	Keys int `json:"keys"`
	// HeapBytes is the growth of the live heap (runtime.MemStats.HeapAlloc
	// after a collection) from before the structure was made to after it
	// was filled.
	HeapBytes uint64 `json:"heap_bytes"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: memory STRUCTURE")
		os.Exit(2)
	}
	s, ok := bench.Lookup(os.Args[1])
	if !ok {
		fmt.Fprintf(os.Stderr, "memory: unknown structure %q\n", os.Args[1])
		os.Exit(2)
	}
	keys := bench.Keys(bench.NumKeys)
	before := liveHeap()
	in := s.New()
	for _, k := range keys {
		in.Fill(strings.Clone(k))
	}
	after := liveHeap()
	runtime.KeepAlive(in)
	runtime.KeepAlive(keys)
	in.Close()

	var held uint64
	if after > before {
		held = after - before
	}
	if err := json.NewEncoder(os.Stdout).Encode(Result{Structure: s.Name, Keys: len(keys), HeapBytes: held}); err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(1)
	}
}

// liveHeap collects garbage and returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

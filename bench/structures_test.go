package bench

import (
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestKeys(t *testing.T) {
	keys := Keys(5000)
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if len(k) != 13 || !strings.HasPrefix(k, "client-") {
			t.Fatalf("key %q, want client-NNNNNN", k)
		}
		if seen[k] {
			t.Fatalf("key %q twice", k)
		}
		seen[k] = true
	}
	if again := Keys(5000); again[0] != keys[0] || again[4999] != keys[4999] {
		t.Errorf("Keys is not deterministic: %q %q, then %q %q", keys[0], keys[4999], again[0], again[4999])
	}
}

// TestStructures checks that each structure does what its configuration
// says: after filling, every call is allowed, except in the structures
// that are meant to refuse, where every call is refused.
func TestStructures(t *testing.T) {
	keys := Keys(2000)
	for _, s := range Structures() {
		t.Run(s.Name, func(t *testing.T) {
			if s.Label == "" || s.Config == "" {
				t.Errorf("missing label or configuration")
			}
			if got, ok := Lookup(s.Name); !ok || got.Name != s.Name {
				t.Errorf("Lookup(%q) = %q, %v", s.Name, got.Name, ok)
			}
			in := s.New()
			defer in.Close()
			for _, k := range keys {
				in.Fill(strings.Clone(k))
			}
			for round := range 3 {
				for _, k := range keys {
					if got := in.Op(k); got == s.Refuses {
						t.Fatalf("round %d, key %q: allowed = %v, want %v", round, k, got, !s.Refuses)
					}
				}
			}
		})
	}
}

// TestAllocs checks that the types of package limits and the plain maps
// allocate nothing per call once filled, as the benchmarks report.
func TestAllocs(t *testing.T) {
	keys := Keys(100)
	for _, s := range Structures() {
		if s.Kind == Peer {
			continue
		}
		in := s.New()
		for _, k := range keys {
			in.Fill(strings.Clone(k))
		}
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			in.Op(keys[i%len(keys)])
			i++
		})
		in.Close()
		if allocs != 0 {
			t.Errorf("%s: %v allocations per call, want 0", s.Name, allocs)
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	if _, ok := Lookup("NoSuchStructure"); ok {
		t.Error("Lookup of an unknown name succeeded")
	}
}

func TestShardSize(t *testing.T) {
	if got := unsafe.Sizeof(mapShard{}); got != 64 {
		t.Errorf("a shard of the sharded map takes %d bytes, want 64 (one cache line)", got)
	}
}

// TestChurn checks that each churning configuration allows every call to
// a key whose state has expired, as the churn benchmark expects, and that
// it says how it is configured.
func TestChurn(t *testing.T) {
	keys := Keys(500)
	n := 0
	for _, s := range Structures() {
		if s.Churn == nil {
			continue
		}
		n++
		t.Run(s.Name, func(t *testing.T) {
			if s.ChurnConfig == "" {
				t.Error("no churn configuration described")
			}
			in := s.Churn()
			defer in.Close()
			for _, k := range keys {
				in.Fill(strings.Clone(k))
			}
			for round := range 3 {
				time.Sleep(3 * time.Millisecond) // every key's state expires
				for _, k := range keys {
					if !in.Op(k) {
						t.Fatalf("round %d, key %q refused after its state expired", round, k)
					}
				}
			}
		})
	}
	if n < 5 {
		t.Errorf("%d structures churn, want the GCRA and the peers", n)
	}
}

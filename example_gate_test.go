package limits_test

import (
	"errors"
	"fmt"

	"github.com/limitsgo/limits"
)

// errBusy is a card room's answer when it cannot open another table.
var errBusy = errors.New("busy: join an open table or try later")

// room is a card room of a game server: a table is the resource that
// costs (its state, its timers, its players' sockets), and the room's
// gate caps how many are open. Joining a table that is open costs nothing
// the gate counts, so it is never refused for capacity.
type room struct {
	gate   *limits.Gate
	tables map[string]*table
}

// table holds its place in the gate for as long as it is open.
type table struct {
	place   limits.Permit
	players int
}

// open opens a table, taking a place in the gate for its whole life. A
// reconnect, which reopens the table its players were at, is critical: it
// may take the places kept for it.
func (r *room) open(name string, reconnect bool) error {
	class := limits.PriorityDefault
	if reconnect {
		class = limits.PriorityCritical
	}
	t := &table{players: 1}
	var ok bool
	if t.place, ok = r.gate.TryEnterPriority(class); !ok {
		return errBusy
	}
	r.tables[name] = t
	return nil
}

// join seats a player at an open table: the gate is not asked.
func (r *room) join(name string) error {
	t, ok := r.tables[name]
	if !ok {
		return errors.New("no such table")
	}
	t.players++
	return nil
}

// close closes a table and gives its place back.
func (r *room) close(name string) {
	if t, ok := r.tables[name]; ok {
		t.place.Release()
		delete(r.tables, name)
	}
}

// The table-capacity rule for code that calls a Gate directly: cap the
// operation that allocates the resource (opening a table), not the cheap
// one (joining a table), and keep a share of the places for reconnects,
// so that under a rush of new tables the players who lost theirs still
// get back in. Here a room of 6 tables keeps 2 for reconnects: 4 new
// tables open, the fifth is refused, joining is never refused, and two
// reconnects reopen their tables in the places kept for them.
//
// Which operation the gate caps decides what it protects: a gate on joins
// would refuse a player a seat at a table already paid for, while tables
// kept multiplying.
func ExampleGate_tables() {
	gate, err := limits.NewGate(6, limits.WithReserve(limits.PriorityCritical, 2))
	if err != nil {
		panic(err)
	}
	r := &room{gate: gate, tables: map[string]*table{}}
	for i := 1; i <= 5; i++ {
		fmt.Printf("open t%d: %v\n", i, r.open(fmt.Sprint("t", i), false))
	}
	for range 3 {
		if err := r.join("t1"); err != nil {
			panic(err)
		}
	}
	fmt.Println("players at t1:", r.tables["t1"].players)
	fmt.Println("reopen r1:", r.open("r1", true))
	fmt.Println("reopen r2:", r.open("r2", true))
	fmt.Println("reopen r3:", r.open("r3", true))
	// The places kept are the last ones, not places of their own: a new
	// table opens while fewer than 4 tables of any kind are open.
	r.close("t1")
	r.close("t2")
	fmt.Println("open t6 with 4 open:", r.open("t6", false))
	r.close("r1")
	fmt.Println("open t6 with 3 open:", r.open("t6", false))
	s := gate.Stats()
	for _, c := range s.Classes[1:] {
		fmt.Printf("%s: admitted %d, shed %d, limit %d\n", c.Priority, c.Admitted, c.Shed, c.Limit)
	}
	// Output:
	// open t1: <nil>
	// open t2: <nil>
	// open t3: <nil>
	// open t4: <nil>
	// open t5: busy: join an open table or try later
	// players at t1: 4
	// reopen r1: <nil>
	// reopen r2: <nil>
	// reopen r3: busy: join an open table or try later
	// open t6 with 4 open: busy: join an open table or try later
	// open t6 with 3 open: <nil>
	// default: admitted 5, shed 2, limit 4
	// critical: admitted 2, shed 1, limit 6
}

package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestCompare runs the comparison briefly, for the adaptive gate and no
// gate at twice the capacity, and checks the table's shape: the gate
// sheds, and without one nothing is shed (requests time out instead).
func TestCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a real server for a few seconds")
	}
	cfg := config{slots: 4, service: 10 * time.Millisecond, loads: []float64{2}, warm: time.Second, measure: time.Second, timeout: 2 * time.Second}
	all := fronts(cfg.slots)
	cfg.fronts = []front{all[0], all[3]}
	table := compare(cfg, io.Discard)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", table)
	}
	if cells := strings.Split(lines[2], "|"); len(cells) < 6 || strings.TrimSpace(cells[1]) != "no gate" || strings.TrimSpace(cells[5]) != "0.0%" {
		t.Errorf("no gate row: %s", lines[2])
	}
	if cells := strings.Split(lines[3], "|"); len(cells) < 6 || strings.TrimSpace(cells[1]) != "adaptive (from 16)" || strings.TrimSpace(cells[5]) == "0.0%" {
		t.Errorf("adaptive row: %s", lines[3])
	}
}

package metrics

// This file describes the metrics of a client that stays under other
// services' limits (package pace: an httplimit.Transport, a
// grpclimit.ClientInterceptor) from its pace.Stats.

import "github.com/limitsgo/limits/pace"

// The metrics of a client, at these indices of the Metrics of its Set.
const (
	clientRequests = iota
	clientSent
	clientWaited
	clientWait
	clientPaused
	clientRetries
	clientRetryBudgetSpent
	clientThrottled
	clientDeadlineExceeded
	clientTableFull
	clientKeys
	nClient
)

// clientSet returns the Set of a client whose counters stats returns,
// named by the protocol of its first snapshot: limits_http_client_* for
// "http", limits_grpc_client_* for "grpc", limits_client_* for a Pacer
// used directly.
func clientSet(stats func() pace.Stats) Set {
	first := stats()
	sub, unit, what := "client", "{request}", "Requests"
	switch first.Protocol {
	case "":
	case "grpc":
		sub, unit, what = "grpc_client", "{call}", "Calls"
	default:
		sub = first.Protocol + "_client"
	}
	counter := func(name, help string) Metric {
		return Metric{Subsystem: sub, Name: name, Kind: Counter, Unit: unit, Help: help}
	}
	ms := []Metric{
		clientRequests:         counter("requests", what+" given to the client."),
		clientSent:             counter("sent", what+" sent to the server, retries included."),
		clientWaited:           counter("waited", what+" that waited for their key's pace or pause."),
		clientWait:             {Subsystem: sub, Name: "wait", Kind: Counter, Unit: "s", Help: "Time spent waiting for a key's pace or pause, added up."},
		clientPaused:           counter("paused", "Answers of the server that paused their key, until the time they gave."),
		clientRetries:          counter("retries", "Retries of refusals sent."),
		clientRetryBudgetSpent: counter("retry_budget_spent", "Refusals returned without a retry, their key's retry budget spent."),
		clientThrottled:        counter("throttled", what+" refused locally by client-side throttling, never sent."),
		clientDeadlineExceeded: counter("deadline_exceeded", what+" failed at once, their turn coming after their deadline."),
		clientTableFull:        counter("table_full", what+" failed because every key of the table was held."),
		clientKeys:             {Subsystem: sub, Name: "keys", Kind: Gauge, Unit: "{key}", Help: "Keys the client holds now."},
	}
	return Set{Metrics: ms, Read: func(e Emitter) {
		s := stats()
		for m, v := range [...]uint64{
			clientRequests: s.Requests, clientSent: s.Sent, clientWaited: s.Waited, clientPaused: s.Paused,
			clientRetries: s.Retries, clientRetryBudgetSpent: s.RetryBudgetSpent, clientThrottled: s.Throttled,
			clientDeadlineExceeded: s.DeadlineExceeded, clientTableFull: s.TableFull,
		} {
			if m != clientWait && m != clientKeys {
				e.Value(m, Count(v))
			}
		}
		e.Float(clientWait, s.WaitTime.Seconds())
		e.Value(clientKeys, int64(s.Keys))
	}}
}

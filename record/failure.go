package record

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Failure is one entry of an execution's failures[]: one backend and the
// non-zero counters of its failure classes, as the sortie + Nighthawk stack
// writes them:
//
//	{"backend": "10.10.3.22:8443", "counters": {"benchmark.http_5xx": 3}}
type Failure struct {
	// Backend is the engine's address.
	Backend string `json:"backend"`
	// Counters holds the failure classes that are not zero on it.
	Counters map[string]uint64 `json:"counters,omitempty"`
	// Reason is set only when the entry was read from an earlier report of
	// this project, which wrote a sentence in place of the object. It is
	// never written.
	Reason string `json:"-"`
}

// UnmarshalJSON reads either shape of an entry: the object, or the
// sentence earlier reports of this project wrote.
func (f *Failure) UnmarshalJSON(b []byte) error {
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return err
		}
		*f = Failure{Reason: s}
		return nil
	}
	type plain Failure // no methods: no recursion
	var p plain
	if err := json.Unmarshal(t, &p); err != nil {
		return fmt.Errorf("failures[]: want {backend, counters} or a sentence: %w", err)
	}
	*f = Failure(p)
	return nil
}

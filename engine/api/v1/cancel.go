package enginev1

import "time"

// CancelDrain is how long a cancelled execution waits for the requests it
// has in flight, at most (less when the request's own timeout is shorter):
// then those still unanswered are counted in benchmark.http_inflight_lost
// and the Result is sent. A cancel comes from a driver that is stopping
// (SIGTERM, a refused stage, a missed deadline); it must not wait out a
// stalled target's 30 s timeout. A driver derives how long it awaits a
// cancelled execution's answer from it.
const CancelDrain = 2 * time.Second

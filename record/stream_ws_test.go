package record

import "testing"

// TestWebSocketLaw: a WebSocket result conserves by its outcome classes
// alone (sent + deferred + unavailable; the fates of a message sent and
// the connection events are not added again), Succeeded is its echoes,
// and the zero-failure set is every stream_* counter but messages sent
// and received and streams_opened.
func TestWebSocketLaw(t *testing.T) {
	c := map[string]uint64{
		StreamMessagesSent: 90, StreamDeferred: 6, StreamUnavailable: 4,
		StreamMessagesReceived: 85, StreamUnexpectedMessage: 1, StreamInflightLost: 3, StreamDrainIncomplete: 1,
		StreamsOpened: 4, StreamOpenFailures: 1, StreamUpgradeRejected: 1, StreamEarlyClose: 2, StreamProtocolErrors: 1,
	}
	r := BackendResult{BackendName: "node-a", Planned: 100, Counters: c}
	if err := r.Conserves(); err != nil {
		t.Errorf("Conserves() = %v", err)
	}
	if n := Sum(c); n != 100 {
		t.Errorf("Sum = %d, want 100", n)
	}
	if n := Succeeded(c); n != 85 {
		t.Errorf("Succeeded = %d, want the 85 echoed", n)
	}
	r.Planned = 101
	if r.Conserves() == nil {
		t.Error("Conserves() = nil for a message unaccounted for")
	}
	for _, k := range append(append([]string(nil), StreamDetails...), StreamMessagesSent, StreamDeferred, StreamUnavailable) {
		want := k != StreamMessagesSent && k != StreamMessagesReceived && k != StreamsOpened
		if InZeroFailureSet(k) != want {
			t.Errorf("InZeroFailureSet(%s) = %v, want %v", k, !want, want)
		}
	}
}

package enginev1

import "time"

// The defaults of the TCP, UDP and WebSocket settings, where a field left 0 (or
// unset) means its default: those of the sortie + Nighthawk stack. The
// engine applies them and the plan shows them, from this one place.
const (
	DefaultTCPConnections    = 1
	DefaultTCPMaxInflight    = 256
	DefaultTCPDrain          = 500 * time.Millisecond
	DefaultUDPMaxInflight    = 256
	DefaultUDPTimeout        = time.Second
	DefaultStreamsPerWorker  = 1
	DefaultStreamMaxInflight = 256
	DefaultStreamDrain       = 500 * time.Millisecond
)

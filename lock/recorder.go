package lock

import "github.com/lockscope/lockscope/event"

// Recorder receives the lifecycle events of a Client's locks. Record is called
// on the lock path, so it must never block: an implementation buffers and
// drops when full (see Emitter). A nil Recorder in Options means no events and
// no cost.
type Recorder interface {
	Record(e event.Event)
}

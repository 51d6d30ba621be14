package lock

import "github.com/lockscope/lockscope/event"

// Recorder receives lock lifecycle events. Record is called on the lock path
// and must never block; *Emitter implements it.
type Recorder interface{ Record(e event.Event) }

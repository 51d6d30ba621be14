package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// A release request travels twice: as a Requested event on the stream (the
// record, for the collector) and as a Redis Pub/Sub message on the channel
// of the lease asked (the delivery, for the holder). The message is JSON so
// that any client can read it with its standard library:
//
//	PUBLISH lockscope:release-request:<lease> {"v":1,"lease":"9f86d081884c7d65","by":"alice","reason":"I need to edit it","ts":1700000000000000000,"grace_ms":30000}
//
// One channel per lease (not per client, key or owner): a new holder of
// the key has another lease, so it is never subscribed to the channel an
// operator who saw the previous holder publishes on; and PUBSUB NUMSUB of
// the channel says whether that very hold listens now (see docs/events.md).

// RequestChannelPrefix starts the Pub/Sub channel of every lease's release
// requests (the ACL channel pattern is "&lockscope:release-request:*").
const RequestChannelPrefix = "lockscope:release-request:"

// MaxRequestBytes bounds a release request message: a listener drops a
// longer one unread.
const MaxRequestBytes = 4 << 10

// ErrBadRequest reports a release request message that is not one.
var ErrBadRequest = errors.New("event: malformed release request")

// RequestChannel returns the Pub/Sub channel the holder of lease listens
// on for release requests.
func RequestChannel(lease string) string { return RequestChannelPrefix + lease }

// Request is an operator's request that one hold release its lock.
type Request struct {
	Lease  string        // the hold asked (its public lease id)
	By     string        // the operator who asks
	Reason string        // why
	TS     int64         // unix ns when the operator asked
	Grace  time.Duration // how long the operator waits before it may force (0: not said); ms on the wire
}

type requestJSON struct {
	V       int    `json:"v"`
	Lease   string `json:"lease"`
	By      string `json:"by"`
	Reason  string `json:"reason"`
	TS      int64  `json:"ts"`
	GraceMS int64  `json:"grace_ms,omitempty"`
}

// Encode returns r as the message published on RequestChannel(r.Lease).
// By and Reason must be UTF-8 (JSON carries nothing else faithfully): an
// invalid byte becomes U+FFFD.
func (r Request) Encode() []byte {
	b, _ := json.Marshal(requestJSON{V: Version, Lease: r.Lease, By: r.By, Reason: r.Reason, TS: r.TS,
		GraceMS: r.Grace.Milliseconds()})
	return b
}

// DecodeRequest parses a message Encode wrote. Unknown fields are ignored;
// a message over MaxRequestBytes, of a later version, without a lease or
// with a negative grace is ErrBadRequest.
func DecodeRequest(b []byte) (Request, error) {
	if len(b) > MaxRequestBytes {
		return Request{}, fmt.Errorf("%w: %d bytes, more than %d", ErrBadRequest, len(b), MaxRequestBytes)
	}
	var j requestJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Request{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	switch {
	case j.V < 1 || j.V > Version:
		return Request{}, fmt.Errorf("%w: version %d", ErrBadRequest, j.V)
	case j.Lease == "" || !utf8.ValidString(j.Lease):
		return Request{}, fmt.Errorf("%w: no lease", ErrBadRequest)
	case j.GraceMS < 0 || j.GraceMS > int64(time.Duration(1<<62)/time.Millisecond):
		return Request{}, fmt.Errorf("%w: grace %d ms", ErrBadRequest, j.GraceMS)
	}
	return Request{Lease: j.Lease, By: j.By, Reason: j.Reason, TS: j.TS, Grace: time.Duration(j.GraceMS) * time.Millisecond}, nil
}

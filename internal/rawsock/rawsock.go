package rawsock

import "errors"

// ErrWouldBlock is what a Conn's Read returns within Pump's step when the
// socket has nothing more to read for now.
var ErrWouldBlock = errors.New("rawsock: read would block")

// A Stepper is what Conn.Pump runs each time the socket became readable.
// An interface rather than a function: a stream's step is a part of the
// stream's state, which the pump's hot lines list, where a closure would be
// an object of its own, reached one miss later.
type Stepper interface {
	// Step reads what came; it returns false to wait for more, true to end
	// the pump.
	Step() bool
}

// StepFunc makes a function a Stepper.
type StepFunc func() bool

// Step calls f.
func (f StepFunc) Step() bool { return f() }

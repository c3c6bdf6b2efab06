package rawsock

import "errors"

// ErrWouldBlock is what a Conn's Read returns within Pump's step when the
// socket has nothing more to read for now.
var ErrWouldBlock = errors.New("rawsock: read would block")

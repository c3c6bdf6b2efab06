package intercept

import (
	"encoding/json"
	"net"
	"sync"
)

// A Conn is an intercepted connection, its TLS terminated: what the agent
// sends on it is plain HTTP meant for Host.
type Conn struct {
	net.Conn
	host string
}

// Host is the host:port the agent asked the proxy to connect to.
func (c *Conn) Host() string { return c.host }

// listener hands intercepted connections to whoever serves them.
type listener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newListener() *listener {
	return &listener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// put hands c over, or closes it when the listener is closed.
func (l *listener) put(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.closed:
		c.Close()
	}
}

func (l *listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr is a name for the listener: it has no address of its own.
func (l *listener) Addr() net.Addr { return interceptedAddr{} }

type interceptedAddr struct{}

func (interceptedAddr) Network() string { return "intercepted" }
func (interceptedAddr) String() string  { return "intercepted" }

func jsonError(msg, code string) ([]byte, error) {
	type body struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	}
	return json.Marshal(map[string]body{"error": {Message: msg, Type: "proxy_error", Code: code}})
}

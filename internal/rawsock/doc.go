// Package rawsock reads and writes TCP sockets with raw system calls, for
// the proxy's two hot sockets: the client's and the upstream's.
//
// Every Read and Write of a net.Conn goes through syscall.Syscall, which
// enters and leaves the runtime's syscall state (entersyscall, exitsyscall).
// Between the events of thousands of open streams every P is idle, so the
// runtime's sysmon thread sleeps deeply; the next syscall entered that way
// wakes it with a futex and resets its sleep to 20 µs, and it spins in short
// sleeps again. Between the events of many open streams that wake-up is a
// sizeable part of the proxy's CPU, on top of the syscall entry and exit
// work (docs/streams.md). A socket is non-blocking, so its read or write returns at once
// (EAGAIN when it would block): made with syscall.RawSyscall it needs none
// of that, and wakes nobody. On EAGAIN the goroutine parks on the netpoller
// through syscall.RawConn, exactly as net.Conn does, so deadlines, Close and
// the poller behave as they do for the socket's own methods, and errors look
// the same to callers.
//
// The other calls the proxy makes on a socket for every request, a peek
// (Peek) and epoll_ctl (EpollCtl), never block either, and are raw too.
//
// Only Linux makes raw calls; elsewhere Wrap returns the connection as it
// is, and Peek is a plain recvfrom.
package rawsock

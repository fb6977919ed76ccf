package postgres_test

import (
	"net/netip"
	"syscall"
	"testing"
)

// bindOnly binds a TCP socket to addr (an IPv4 host:port) without listening on it, until t ends:
// the kernel refuses every connection to addr meanwhile, and nothing else can bind it.
func bindOnly(t *testing.T, addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	if err == nil {
		err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()})
	}
	if err != nil {
		syscall.Close(fd)
		return err
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return nil
}

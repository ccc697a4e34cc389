package testkit

import (
	"net"

	"github.com/twmb/franz-go/pkg/kfake"
)

// WithAddr makes the (single) broker listen on addr, such as
// "127.0.0.1:9092", instead of a free loopback port. Only this package's
// tests use it.
func WithAddr(addr string) KfakeOption {
	return WithKfakeOpts(kfake.ListenFn(func(network, _ string) (net.Listener, error) {
		return net.Listen(network, addr)
	}))
}

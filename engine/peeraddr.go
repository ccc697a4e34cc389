package engine

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// maxPeerAddrLen bounds an advertised address (a DNS name is at most 253
// bytes, plus ":65535").
const maxPeerAddrLen = 260

// ValidPeerAddr checks that addr is a bare host:port an instance may
// advertise for routing: a DNS name or an IP address (IPv6 in brackets) and
// a decimal port from 1 to 65535, with nothing else — no scheme, userinfo,
// path, query, fragment, percent sign or whitespace. Group members that
// advertise anything else are never contacted. The error wraps ErrInvalid.
func ValidPeerAddr(addr string) error {
	if addr == "" || len(addr) > maxPeerAddrLen {
		return fmt.Errorf("advertised address must be 1 to %d bytes: %w", maxPeerAddrLen, ErrInvalid)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("advertised address is not host:port: %w", ErrInvalid)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || port[0] == '0' {
		return fmt.Errorf("advertised port %q is not a number from 1 to 65535: %w", truncate(port, 16), ErrInvalid)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return fmt.Errorf("advertised IP address must not carry a zone: %w", ErrInvalid)
		}
		if ip.Is6() && !ip.Is4In6() && !strings.HasPrefix(addr, "[") {
			return fmt.Errorf("advertised IPv6 address must be in brackets: %w", ErrInvalid)
		}
		return nil
	}
	if !validHostname(host) {
		return fmt.Errorf("advertised host is neither an IP address nor a DNS name: %w", ErrInvalid)
	}
	return nil
}

// validHostname reports whether h is a DNS name: dot-separated labels of
// letters, digits, hyphens and underscores, 1 to 63 bytes each, not
// starting or ending with a hyphen.
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// truncate returns s cut to at most n bytes, marked with "..." when cut,
// for logging input of unbounded size.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

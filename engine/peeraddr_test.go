package engine

import (
	"errors"
	"strings"
	"testing"
)

func TestValidPeerAddr(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"keepstate-0.keepstate:7001", true},
		{"127.0.0.1:7001", true},
		{"[::1]:7001", true},
		{"localhost:1", true},
		{"host_name:65535", true},
		{"127.0.0.1:27999/internal/admin?x=", false},
		{"http://127.0.0.1:7001", false},
		{"user@127.0.0.1:7001", false},
		{"127.0.0.1:7001#frag", false},
		{"127.0.0.1", false},
		{"127.0.0.1:0", false},
		{"127.0.0.1:65536", false},
		{"127.0.0.1:07001", false},
		{"127.0.0.1: 7001", false},
		{"[fe80::1%25eth0]:7001", false},
		{"evil%2fhost:7001", false},
		{"-bad.host:7001", false},
		{":7001", false},
		{"", false},
		{strings.Repeat("a", 300) + ":7001", false},
		{"a b:7001", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := ValidPeerAddr(tt.addr)
			if got := err == nil; got != tt.ok {
				t.Fatalf("ValidPeerAddr(%q) = %v, want ok=%v", tt.addr, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

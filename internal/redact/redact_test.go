package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://key:s3cret@registry:8081/x", "http://REDACTED@registry:8081/x"},
		{"redis://:s3cret@localhost:6379/0", "redis://REDACTED@localhost:6379/0"},
		{"https://user@host", "https://REDACTED@host"},
		{"http://localhost:8081", "http://localhost:8081"},
		{"http://key:s3cret@host:bad port/%zz", "http://REDACTED@host:bad port/%zz"},
		{"key:s3cret@host:1%", "REDACTED@host:1%"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := URL(tt.in); got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if strings.Contains(URL(tt.in), "s3cret") {
				t.Errorf("URL(%q) still holds the secret", tt.in)
			}
		})
	}
}

func TestUserinfo(t *testing.T) {
	clean, user, pw := Userinfo("http://key:s3cret@registry:8081")
	if clean != "http://registry:8081" || user != "key" || pw != "s3cret" {
		t.Errorf("Userinfo = %q %q %q, want http://registry:8081 key s3cret", clean, user, pw)
	}
	clean, user, pw = Userinfo("http://registry:8081")
	if clean != "http://registry:8081" || user != "" || pw != "" {
		t.Errorf("Userinfo without credentials = %q %q %q", clean, user, pw)
	}
	clean, _, _ = Userinfo("http://key:s3cret@host:x/%zz")
	if strings.Contains(clean, "s3cret") {
		t.Errorf("Userinfo of a bad URL kept the secret: %q", clean)
	}
}

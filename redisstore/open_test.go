package redisstore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestOpenUnreachable(t *testing.T) {
	url := "redis://:hunter2@127.0.0.1:" + strconv.Itoa(closedPort(t)) + "/0"
	s, err := Open(ctxT(t), url)
	if err == nil {
		s.Close()
		t.Fatal("Open of a closed port: got nil error")
	}
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Open of a closed port = %v; want ErrUnavailable", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "hunter2") {
		t.Errorf("error message shows the password: %s", msg)
	}
	for _, want := range []string{strings.Replace(url, ":hunter2@", "REDACTED@", 1), "start redis-server or set --redis-url"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error message %q does not contain %q", msg, want)
		}
	}
}

func TestOpenInvalidURL(t *testing.T) {
	tests := []struct{ name, url string }{
		{"scheme", "http://127.0.0.1:6379"},
		{"port", "redis://:hunter2@127.0.0.1:notaport/0"},
		{"database", "redis://:hunter2@127.0.0.1:6379/zero"},
		{"unknown option", "redis://:hunter2@127.0.0.1:6379/0?bogus=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(ctxT(t), tc.url)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q): got nil error", tc.url)
			}
			if errors.Is(err, engine.ErrUnavailable) {
				t.Errorf("Open(%q) = %v; a malformed URL is not an outage", tc.url, err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error message shows the password: %v", err)
			}
		})
	}
}

func TestOpenURLForms(t *testing.T) {
	r := testkit.StartRedis(t, testkit.WithRedisPassword("pw0"),
		testkit.WithRedisArgs("--user", "alice", "on", ">alicepw", "~*", "&*", "+@all"))
	base := r.Addr()
	tests := []struct {
		name    string
		url     string
		db      int
		wantErr error // nil: must open
		auth    bool  // the error is about credentials
	}{
		{"password", "redis://:pw0@" + base + "/0", 0, nil, false},
		{"default port path without db", "redis://:pw0@" + base, 0, nil, false},
		{"database number", "redis://:pw0@" + base + "/3", 3, nil, false},
		{"db query option", "redis://:pw0@" + base + "/?db=5", 5, nil, false},
		{"acl user and password", "redis://alice:alicepw@" + base + "/2", 2, nil, false},
		{"client options", "redis://:pw0@" + base + "/0?dial_timeout=1s&read_timeout=2s&pool_size=4", 0, nil, false},
		{"wrong password", "redis://:nope@" + base + "/0", 0, engine.ErrUnavailable, true},
		{"wrong user", "redis://bob:alicepw@" + base + "/0", 0, engine.ErrUnavailable, true},
		{"no password", "redis://" + base + "/0", 0, engine.ErrUnavailable, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := uniquePrefix()
			s, err := Open(ctxT(t), tc.url, WithPrefix(prefix))
			if tc.wantErr != nil {
				if err == nil {
					s.Close()
					t.Fatalf("Open(%s): got nil error", tc.url)
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Open(%s) = %v; want %v", tc.url, err, tc.wantErr)
				}
				if tc.auth && !strings.Contains(err.Error(), "check the user and password") {
					t.Errorf("Open(%s) = %v; want a hint about credentials", tc.url, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%s): %v", tc.url, err)
			}
			defer s.Close()
			tb := openTable(t, s, orderSpec)
			tapply(t, tb, 0, 1, odoc("a", 0, 1, 5, "x"))
			for db := range 6 {
				got, err := testkit.RedisDo(r.Addr(), 2*time.Second, []string{"AUTH", "pw0"},
					[]string{"SELECT", strconv.Itoa(db)}, []string{"EXISTS", tb.keys.doc(0, []byte("a"))})
				if err != nil {
					t.Fatal(err)
				}
				want := "0"
				if db == tc.db {
					want = "1"
				}
				if got[2] != want {
					t.Errorf("EXISTS of the document in db %d = %s, want %s", db, got[2], want)
				}
			}
		})
	}
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir and returns their paths and a pool trusting it.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "keepstate test redis"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestOpenTLS(t *testing.T) {
	certFile, keyFile, pool := writeSelfSigned(t, t.TempDir())
	tlsPort := closedPort(t)
	r := testkit.StartRedis(t, testkit.WithRedisArgs("--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", certFile,
		"--tls-auth-clients", "no"))
	_ = r
	tlsAddr := "127.0.0.1:" + strconv.Itoa(tlsPort)
	tests := []struct {
		name   string
		url    string
		opts   []Option
		wantOK bool
	}{
		{"trusted private CA", "rediss://" + tlsAddr + "/0", []Option{WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})}, true},
		{"skip_verify", "rediss://" + tlsAddr + "/0?skip_verify=true", nil, true},
		{"untrusted certificate", "rediss://" + tlsAddr + "/0", nil, false},
		{"plain text to the TLS port", "redis://" + tlsAddr + "/0?dial_timeout=1s&read_timeout=1s", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]Option{WithPrefix(uniquePrefix())}, tc.opts...)
			s, err := Open(ctxT(t), tc.url, opts...)
			if !tc.wantOK {
				if err == nil {
					s.Close()
					t.Fatalf("Open(%s): got nil error", tc.url)
				}
				if !errors.Is(err, engine.ErrUnavailable) {
					t.Fatalf("Open(%s) = %v; want ErrUnavailable", tc.url, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%s): %v", tc.url, err)
			}
			defer s.Close()
			tb := openTable(t, s, orderSpec)
			tapply(t, tb, 0, 1, odoc("a", 0, 1, 17, "x"))
			got, err := tb.Get(ctxT(t), []byte("a"))
			if err != nil || got.Index[0].Num != 17 {
				t.Fatalf("Get over TLS = %+v, %v; want total 17", got, err)
			}
		})
	}
}

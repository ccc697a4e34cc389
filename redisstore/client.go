package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/redact"
	"github.com/redis/go-redis/v9"
)

// Mode says what kind of Redis deployment a URL names, and so how Open
// reads it (WithMode).
type Mode string

// The modes of WithMode. Each reads the URL with go-redis's own parser;
// rediss:// turns TLS on and the userinfo authenticates in every mode.
const (
	// ModeSingle is one server: redis[s]://[user:password@]host:port/db
	// (redis.ParseURL).
	ModeSingle Mode = "single"
	// ModeCluster is a Redis Cluster reached through any of its nodes:
	// redis[s]://[user:password@]host1:port1?addr=host2:port2&addr=host3:port3
	// (redis.ParseClusterURL). Each table lives in one hash slot (see the
	// package doc).
	ModeCluster Mode = "cluster"
	// ModeSentinel is a master found through its Sentinels:
	// redis[s]://[user:password@]sentinel1:port1?addr=sentinel2:port2&master_name=mymaster
	// (redis.ParseFailoverURL); the userinfo authenticates with the
	// Sentinels, the query options username and password with the master.
	ModeSentinel Mode = "sentinel"
)

// ParseMode returns the Mode named s, or an error wrapping
// engine.ErrInvalid.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeSingle, ModeCluster, ModeSentinel:
		return m, nil
	}
	return "", fmt.Errorf("redisstore: unknown redis mode %q (want single, cluster or sentinel): %w", s, engine.ErrInvalid)
}

// newClient builds the go-redis client of mode for rawURL and returns it
// with the URL as messages may show it (no userinfo, no password or
// username query options). Parse errors never include the password.
func newClient(mode Mode, rawURL string, tlsConf *tls.Config) (redis.UniversalClient, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the whole URL, password included
		}
		return nil, "", fmt.Errorf("redisstore: invalid redis url: %w", err)
	}
	where := redactQuery(redact.URL(u.String())) // no userinfo at all: ACL user names are credentials too
	bad := func(err error) (redis.UniversalClient, string, error) {
		return nil, "", fmt.Errorf("redisstore: invalid %s redis url %s: %w", mode, where, err)
	}
	// tune sets the TLS configuration, if any, and fewer dial attempts per
	// command unless the URL sets them: go-redis dials 5 times per attempt
	// and retries a command 3 times, so with Redis down a call would take
	// seconds to report it. Fail sooner; the engine retries unavailable
	// stores by itself.
	tune := func(conf **tls.Config, dials *int) {
		if tlsConf != nil {
			*conf = tlsConf.Clone()
		}
		if *dials == 0 {
			*dials = 2
		}
	}
	switch mode {
	case ModeSingle, "":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return bad(err)
		}
		tune(&o.TLSConfig, &o.DialerRetries)
		return redis.NewClient(o), where, nil
	case ModeCluster:
		o, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return bad(err)
		}
		tune(&o.TLSConfig, &o.DialerRetries)
		return redis.NewClusterClient(o), where, nil
	case ModeSentinel:
		o, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return bad(err)
		}
		if o.MasterName == "" {
			return bad(errors.New("no master_name query option"))
		}
		tune(&o.TLSConfig, &o.DialerRetries)
		return redis.NewFailoverClient(o), where, nil
	}
	_, err = ParseMode(string(mode))
	return nil, "", err
}

// redactQuery replaces the values of the query options that carry
// credentials (password, username, sentinel_password, ...) in raw.
func redactQuery(raw string) string {
	base, query, ok := strings.Cut(raw, "?")
	if !ok {
		return raw
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		name, _, _ := strings.Cut(p, "=")
		if strings.Contains(name, "password") || strings.Contains(name, "username") {
			parts[i] = name + "=" + redact.Marker
		}
	}
	return base + "?" + strings.Join(parts, "&")
}

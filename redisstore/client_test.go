package redisstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

func TestClientURLs(t *testing.T) {
	tests := []struct {
		name     string
		mode     Mode
		url      string
		addrs    []string // the addresses the client dials first
		user     string
		password string
		db       int
		tls      bool
		master   string
	}{
		{"single", ModeSingle, "redis://redis.example/0", []string{"redis.example:6379"}, "", "", 0, false, ""},
		{"single rediss", ModeSingle, "rediss://u:secret@redis.example:6380/4", []string{"redis.example:6380"}, "u", "secret", 4, true, ""},
		{"cluster", ModeCluster, "redis://:secret@n1:7000?addr=n2:7001&addr=n3:7002",
			[]string{"n1:7000", "n2:7001", "n3:7002"}, "", "secret", 0, false, ""},
		{"cluster rediss", ModeCluster, "rediss://u:secret@n1:7000?addr=n2:7001", []string{"n1:7000", "n2:7001"}, "u", "secret", 0, true, ""},
		{"sentinel", ModeSentinel, "redis://s1:26379?addr=s2:26380&master_name=mymaster&password=secret",
			[]string{"s1:26379", "s2:26380"}, "", "secret", 0, false, "mymaster"},
		{"sentinel rediss", ModeSentinel, "rediss://s1:26379/2?master_name=m&username=u&password=secret",
			[]string{"s1:26379"}, "u", "secret", 2, true, "m"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, where, err := newClient(tc.mode, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if strings.Contains(where, "secret") {
				t.Errorf("where = %q shows the password", where)
			}
			var addrs []string
			var user, pw string
			var db int
			var tlsOn bool
			switch c := c.(type) {
			case *redis.ClusterClient:
				o := c.Options()
				addrs, user, pw, tlsOn = o.Addrs, o.Username, o.Password, o.TLSConfig != nil
			case *redis.Client:
				o := c.Options()
				addrs, user, pw, db, tlsOn = []string{o.Addr}, o.Username, o.Password, o.DB, o.TLSConfig != nil
			default:
				t.Fatalf("client is a %T", c)
			}
			if tc.mode == ModeSentinel {
				fo, _ := redis.ParseFailoverURL(tc.url)
				addrs = fo.SentinelAddrs
				if fo.MasterName != tc.master {
					t.Errorf("master name = %q, want %q", fo.MasterName, tc.master)
				}
			}
			if strings.Join(addrs, ",") != strings.Join(tc.addrs, ",") {
				t.Errorf("addresses = %v, want %v", addrs, tc.addrs)
			}
			if user != tc.user || pw != tc.password || db != tc.db || tlsOn != tc.tls {
				t.Errorf("user %q password set %v db %d tls %v; want %q %v %d %v",
					user, pw != "", db, tlsOn, tc.user, tc.password != "", tc.db, tc.tls)
			}
		})
	}
}

func TestClientURLErrors(t *testing.T) {
	tests := []struct {
		name string
		mode Mode
		url  string
	}{
		{"unknown mode", Mode("ring"), "redis://h:1"},
		{"sentinel without master", ModeSentinel, "redis://:secret@s1:26379"},
		{"bad scheme", ModeCluster, "http://:secret@n1:7000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := newClient(tc.mode, tc.url, nil)
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
	if _, err := ParseMode("ring"); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("ParseMode(ring) = %v, want ErrInvalid", err)
	}
}

func TestRedactQuery(t *testing.T) {
	got := redactQuery("redis://s1:26379?addr=s2:1&master_name=m&password=x&sentinel_password=y&username=u")
	want := "redis://s1:26379?addr=s2:1&master_name=m&password=REDACTED&sentinel_password=REDACTED&username=REDACTED"
	if got != want {
		t.Errorf("redactQuery = %q, want %q", got, want)
	}
}

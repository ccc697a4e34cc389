package testkit

import (
	"net"
	"strings"
	"testing"
	"time"
)

func redisGet(t *testing.T, r *Redis, key string) string {
	t.Helper()
	var cmds [][]string
	if r.Password() != "" {
		cmds = append(cmds, []string{"AUTH", r.Password()})
	}
	cmds = append(cmds, []string{"GET", key})
	got, err := RedisDo(r.Addr(), 2*time.Second, cmds...)
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return got[len(got)-1]
}

func redisSet(t *testing.T, r *Redis, key, val string) {
	t.Helper()
	var cmds [][]string
	if r.Password() != "" {
		cmds = append(cmds, []string{"AUTH", r.Password()})
	}
	cmds = append(cmds, []string{"SET", key, val})
	got, err := RedisDo(r.Addr(), 2*time.Second, cmds...)
	if err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
	if got[len(got)-1] != "OK" {
		t.Fatalf("SET %s: got %q, want OK", key, got)
	}
}

func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

func TestStartRedisAnswersAndStops(t *testing.T) {
	r := StartRedis(t)
	if !strings.HasPrefix(r.URL(), "redis://127.0.0.1:") || !strings.HasSuffix(r.URL(), "/0") {
		t.Errorf("URL() = %q, want redis://127.0.0.1:<port>/0", r.URL())
	}
	if got, want := r.URL(), "redis://"+r.Addr()+"/0"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	redisSet(t, r, "k", "v")
	if got := redisGet(t, r, "k"); got != "v" {
		t.Fatalf("GET k = %q, want v", got)
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if r.Running() {
		t.Fatal("Running() = true after Stop")
	}
	if !refused(r.Addr()) {
		t.Fatalf("%s still accepts connections after Stop", r.Addr())
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := r.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	// Without persistence a restarted server is empty.
	if got := redisGet(t, r, "k"); got != "(nil)" {
		t.Fatalf("GET k after restart without persistence = %q, want (nil)", got)
	}
	if err := r.Start(); err == nil {
		t.Fatal("Start of a running server: got nil error")
	}
}

func TestRedisPersistenceAcrossRestarts(t *testing.T) {
	tests := []struct {
		name        string
		persistence RedisPersistence
		stop        func(*Redis) error
		wantKept    bool
	}{
		{"aof survives SIGTERM", RedisAOF, (*Redis).Stop, true},
		{"aof survives SIGKILL", RedisAOF, (*Redis).Kill, true},
		{"rdb survives SIGTERM", RedisRDB, (*Redis).Stop, true},
		{"rdb loses unsaved data on SIGKILL", RedisRDB, (*Redis).Kill, false},
		{"none loses data on SIGTERM", RedisNoPersistence, (*Redis).Stop, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := StartRedis(t, WithRedisPersistence(tc.persistence))
			port, dir := r.Port(), r.Dir()
			redisSet(t, r, "k", "v")
			if err := tc.stop(r); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if !refused(r.Addr()) {
				t.Fatalf("%s still accepts connections after stop", r.Addr())
			}
			if err := r.Start(); err != nil {
				t.Fatalf("Start: %v", err)
			}
			if r.Port() != port || r.Dir() != dir {
				t.Errorf("restart moved the server: port %d dir %s, want %d %s", r.Port(), r.Dir(), port, dir)
			}
			want := "(nil)"
			if tc.wantKept {
				want = "v"
			}
			if got := redisGet(t, r, "k"); got != want {
				t.Fatalf("GET k after restart = %q, want %q", got, want)
			}
			if err := r.RestartEmpty(); err != nil {
				t.Fatalf("RestartEmpty: %v", err)
			}
			if got := redisGet(t, r, "k"); got != "(nil)" {
				t.Fatalf("GET k after RestartEmpty = %q, want (nil)", got)
			}
		})
	}
}

func TestRedisPassword(t *testing.T) {
	r := StartRedis(t, WithRedisPassword("s3cret"))
	if got, want := r.URL(), "redis://:s3cret@"+r.Addr()+"/0"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	if _, err := RedisDo(r.Addr(), 2*time.Second, []string{"GET", "k"}); err == nil {
		t.Fatal("GET without AUTH: got nil error, want the server to refuse")
	}
	redisSet(t, r, "k", "v")
	if got := redisGet(t, r, "k"); got != "v" {
		t.Fatalf("GET k with AUTH = %q, want v", got)
	}
}

func TestWipeRunningServerRefused(t *testing.T) {
	r := StartRedis(t)
	if err := r.Wipe(); err == nil {
		t.Fatal("Wipe of a running server: got nil error")
	}
}

func TestLaunchRedisClose(t *testing.T) {
	LookPath(t, "redis-server", RedisInstall)
	r, err := LaunchRedis()
	if err != nil {
		t.Fatalf("LaunchRedis: %v", err)
	}
	redisSet(t, r, "k", "v")
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !refused(r.Addr()) {
		t.Fatalf("%s still accepts connections after Close", r.Addr())
	}
}

func TestLaunchRedisBadArgument(t *testing.T) {
	LookPath(t, "redis-server", RedisInstall)
	r, err := LaunchRedis(WithRedisArgs("--no-such-directive", "1"))
	if err == nil {
		r.Close()
		t.Fatal("LaunchRedis with an unknown directive: got nil error")
	}
	if !strings.Contains(err.Error(), "no-such-directive") {
		t.Errorf("error %q does not show the server's complaint about the directive", err)
	}
}

// Dir returns the server's data directory (the same across restarts).
func (r *Redis) Dir() string { return r.dir }

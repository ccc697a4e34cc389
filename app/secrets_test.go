package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/internal/testkit"
)

// plantedSecret is searched for everywhere; it must never show.
const plantedSecret = "pl4nted-S3CRET-7c1d"

// noSecret fails when text holds the planted secret.
func noSecret(t *testing.T, where, text string) {
	t.Helper()
	if strings.Contains(text, plantedSecret) {
		i := strings.Index(text, plantedSecret)
		t.Errorf("%s holds the planted secret: ...%s...", where, text[max(0, i-120):min(len(text), i+60)])
	}
}

// TestPlantedSecretNeverShows runs the service with a Schema Registry that
// needs credentials (given in the URL, or as user + password file) and a
// Redis whose password is in its URL, feeds it a record with an unknown
// schema id, takes Redis away, and searches the logs, the startup errors,
// the dead-letter headers, /api/stats, /readyz and /metrics for the
// planted secret.
func TestPlantedSecretNeverShows(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistryWithAuth(t, "key", plantedSecret)
	withCreds := strings.Replace(reg.URL(), "http://", "http://key:"+plantedSecret+"@", 1)
	pwFile := filepath.Join(t.TempDir(), "registry-password")
	if err := os.WriteFile(pwFile, []byte(plantedSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func(c *app.Config) (outage func() error)
	}{
		{"credentials in the url, redis store", func(c *app.Config) func() error {
			c.SchemaRegistry = withCreds
			r := testkit.StartRedis(t, testkit.WithRedisPassword(plantedSecret))
			c.Store, c.RedisURL = app.StoreRedis, r.URL()
			return r.Stop
		}},
		{"user and password file, clover store", func(c *app.Config) func() error {
			c.SchemaRegistry = reg.URL()
			c.SchemaRegistryUser, c.SchemaRegistryPasswordFile = "key", pwFile
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig(t, brokers, reg.URL())
			outage := tt.setup(&c)
			logs := &testkit.SyncBuffer{}
			ctx, cancel := context.WithCancel(context.Background())
			addr := make(chan string, 1)
			done := make(chan error, 1)
			go func() { done <- app.Run(ctx, c, logs.Logger(), func(a string) { addr <- a }) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					noSecret(t, "Run's error", err.Error())
				}
				noSecret(t, "the logs", logs.String())
			}()
			var api string
			select {
			case a := <-addr:
				api = "http://" + a
			case err := <-done:
				t.Fatalf("Run: %v", err)
			}
			testkit.Eventually(t, 30*time.Second, "ready", func() error {
				if code, body := httpGet(api + "/readyz"); code != http.StatusOK {
					return fmt.Errorf("readyz %d %s", code, body)
				}
				return nil
			})

			// A valid rating and one with an unknown schema id.
			p := produceConfig(c, 0, 1, 1)
			p.SchemaRegistry, p.SchemaRegistryUser, p.SchemaRegistryPassword = reg.URL(), "key", plantedSecret
			p.Stdin = strings.NewReader(`{"movie_id":7,"rating":6}`)
			if n, err := app.Produce(context.Background(), p, nil); err != nil || n != 1 {
				t.Fatalf("produce: %d %v", n, err)
			}
			produceRaw(t, brokers, c.InputTopic, avro.Frame(987654, []byte{14, 0, 0, 0, 0, 0, 0, 24, 64}))
			waitMovie(t, api, movie{MovieID: 7, Rating: 6, Count: 1}, 30*time.Second)
			var dead []dlqRecord
			testkit.Eventually(t, 20*time.Second, "dead letter", func() error {
				dead = readDLQ(t, brokers, c.ApplicationID+"-dlq")
				if len(dead) != 1 {
					return fmt.Errorf("%d dead letters, want 1", len(dead))
				}
				return nil
			})
			if !strings.Contains(dead[0].reason, "schema") || !strings.Contains(dead[0].reason, strings.TrimPrefix(reg.URL(), "http://")) {
				t.Errorf("DLQ reason %q should name the unknown schema and the registry", dead[0].reason)
			}
			noSecret(t, "the DLQ reason header", dead[0].reason)

			if outage != nil {
				// Take Redis away: its errors reach logs, /readyz and /api/stats.
				if err := outage(); err != nil {
					t.Fatalf("stop redis: %v", err)
				}
				produceRaw(t, brokers, c.InputTopic, avro.Frame(987654, nil))
				p.Stdin = strings.NewReader(`{"movie_id":8,"rating":6}`)
				if _, err := app.Produce(context.Background(), p, nil); err != nil {
					t.Fatalf("produce: %v", err)
				}
				testkit.Eventually(t, 30*time.Second, "store outage reported", func() error {
					if code, body := httpGet(api + "/api/stats"); !strings.Contains(body, `"ready":false`) {
						return fmt.Errorf("/api/stats %d %s", code, body)
					}
					return nil
				})
			}
			for _, path := range []string{"/api/stats", "/readyz", "/metrics", "/movies/7", "/movies?minAvg=0"} {
				_, body := httpGet(api + path)
				noSecret(t, path, body)
			}
		})
	}

	// Startup errors: a wrong password, a registry that is down, bad URLs.
	c := testConfig(t, brokers, withCreds)
	wrong := c
	wrong.SchemaRegistry = strings.Replace(withCreds, plantedSecret, plantedSecret+"x", 1)
	_, err := app.OpenRegistry(context.Background(), wrong, nil)
	if err == nil {
		t.Errorf("OpenRegistry with a wrong password: no error")
	} else {
		noSecret(t, "the wrong-password error", err.Error())
		if n := strings.Count(err.Error(), strings.TrimPrefix(reg.URL(), "http://")); n != 1 {
			t.Errorf("the startup error names the registry %d times, want once: %v", n, err)
		}
	}
	down := c
	down.SchemaRegistry = "http://key:" + plantedSecret + "@127.0.0.1:1"
	if _, err := app.OpenRegistry(context.Background(), down, nil); err == nil || !errors.Is(err, app.ErrUnavailable) {
		t.Errorf("OpenRegistry(down) = %v, want ErrUnavailable", err)
	} else {
		noSecret(t, "the registry-down error", err.Error())
	}
	bad := c
	bad.SchemaRegistry = "ftp://key:" + plantedSecret + "@host"
	bad.Store, bad.RedisURL = app.StoreRedis, "mysql://:"+plantedSecret+"@host"
	if err := bad.Validate(); err == nil {
		t.Errorf("Validate(bad urls) = nil")
	} else {
		noSecret(t, "the config error", err.Error())
	}
	redisDown := c
	redisDown.Store, redisDown.RedisURL = app.StoreRedis, "redis://:"+plantedSecret+"@127.0.0.1:1/0"
	logs := &testkit.SyncBuffer{}
	if _, err := app.OpenStore(context.Background(), redisDown, logs.Logger()); err == nil {
		t.Errorf("OpenStore(redis down) = nil error")
	} else {
		noSecret(t, "the redis-down error", err.Error())
	}
	noSecret(t, "the redis-down logs", logs.String())
}

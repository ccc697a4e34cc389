package deploytest

// Consistency of docker-compose.yml (and the Redis override file) with the
// program: environment names are flags and validate, every address keepstate
// is given is a service it waits for and a port that service listens on,
// volumes sit at the data directories, health checks use real routes.

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/web"
)

type composeFile struct {
	Services map[string]*composeService `yaml:"services"`
	Volumes  map[string]any             `yaml:"volumes"`
}

type composeService struct {
	Image       string         `yaml:"image"`
	Build       *composeBuild  `yaml:"build"`
	Command     []string       `yaml:"command"`
	Environment map[string]any `yaml:"environment"`
	Ports       []string       `yaml:"ports"`
	Volumes     []string       `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	StopGracePeriod string `yaml:"stop_grace_period"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

// env returns the service's environment as strings.
func (s *composeService) env() map[string]string {
	out := map[string]string{}
	for k, v := range s.Environment {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// loadCompose reads the files in order and merges each later one into the
// first the way docker compose merges the fields modelled here: maps merge
// by key, scalars and lists of a later file replace.
func loadCompose(t *testing.T, files ...string) composeFile {
	t.Helper()
	var merged composeFile
	for i, name := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, name))
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		var f composeFile
		if err := yaml.Unmarshal(b, &f); err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		if i == 0 {
			merged = f
			continue
		}
		for sname, o := range f.Services {
			s, ok := merged.Services[sname]
			if !ok {
				merged.Services[sname] = o
				continue
			}
			mergeService(s, o)
		}
		for v, def := range f.Volumes {
			merged.Volumes[v] = def
		}
	}
	if len(merged.Services) == 0 {
		t.Fatalf("%v: no services", files)
	}
	return merged
}

func mergeService(s, o *composeService) {
	if o.Image != "" {
		s.Image = o.Image
	}
	if o.Build != nil {
		s.Build = o.Build
	}
	if o.Command != nil {
		s.Command = o.Command
	}
	if o.Healthcheck != nil {
		s.Healthcheck = o.Healthcheck
	}
	if o.StopGracePeriod != "" {
		s.StopGracePeriod = o.StopGracePeriod
	}
	s.Ports = append(s.Ports, o.Ports...)
	s.Volumes = append(s.Volumes, o.Volumes...)
	if s.Environment == nil {
		s.Environment = map[string]any{}
	}
	for k, v := range o.Environment {
		s.Environment[k] = v
	}
	if s.DependsOn == nil {
		s.DependsOn = o.DependsOn
	} else {
		for k, v := range o.DependsOn {
			s.DependsOn[k] = v
		}
	}
}

func (f composeFile) service(t *testing.T, name string) *composeService {
	t.Helper()
	s, ok := f.Services[name]
	if !ok {
		t.Fatalf("no service %q", name)
	}
	return s
}

// listenPorts returns the ports a service accepts connections on inside the
// compose network, from its own configuration.
func (f composeFile) listenPorts(t *testing.T, name string) []int {
	t.Helper()
	s := f.service(t, name)
	env := s.env()
	var ports []int
	add := func(hostPort string) {
		_, p, err := net.SplitHostPort(hostPort)
		if n, perr := strconv.Atoi(p); err == nil && perr == nil {
			ports = append(ports, n)
		}
	}
	switch name {
	case "kafka":
		// Clients are handed the advertised listeners; only those naming
		// the service are reachable from other containers.
		for _, l := range strings.Split(env["KAFKA_ADVERTISED_LISTENERS"], ",") {
			if u, err := url.Parse(strings.TrimSpace(l)); err == nil && u.Hostname() == name {
				add(u.Host)
			}
		}
	case "schema-registry":
		for _, l := range strings.Split(env["SCHEMA_REGISTRY_LISTENERS"], ",") {
			if u, err := url.Parse(strings.TrimSpace(l)); err == nil {
				add(u.Host)
			}
		}
	case "redis":
		port := 6379
		for i, a := range s.Command {
			if a == "--port" && i+1 < len(s.Command) {
				port, _ = strconv.Atoi(s.Command[i+1])
			}
		}
		ports = append(ports, port)
	default:
		t.Fatalf("no listener rule for service %q", name)
	}
	return ports
}

// publishes reports whether the service publishes containerPort on hostPort.
func (s *composeService) publishes(hostPort, containerPort int) bool {
	return slices.Contains(s.Ports, fmt.Sprintf("%d:%d", hostPort, containerPort))
}

// namedVolumeAt returns the named volume mounted at path, or "".
func (f composeFile) namedVolumeAt(s *composeService, path string) string {
	for _, v := range s.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		dst, _, _ = strings.Cut(dst, ":") // drop :ro / :rw
		if _, declared := f.Volumes[src]; declared && filepath.Clean(dst) == filepath.Clean(path) {
			return src
		}
	}
	return ""
}

func TestCompose(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		store string
	}{
		{name: "clover", files: []string{"docker-compose.yml"}, store: app.StoreClover},
		{name: "redis", files: []string{"docker-compose.yml", "docker-compose.redis.yml"}, store: app.StoreRedis},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := loadCompose(t, tt.files...)
			checkComposeHealthDeps(t, f)
			checkComposeKafka(t, f)
			checkComposeRegistry(t, f)
			checkComposeRedis(t, f)

			ks := f.service(t, "keepstate")
			cfg := configFromEnv(t, "keepstate environment", ks.env())
			if cfg.Store != tt.store {
				t.Errorf("store = %q, want %q", cfg.Store, tt.store)
			}
			if ks.Build == nil || ks.Build.Context == "" {
				t.Fatalf("keepstate is not built from the Dockerfile")
			}
			dockerfile := ks.Build.Dockerfile
			if dockerfile == "" {
				dockerfile = "Dockerfile"
			}
			if _, err := os.Stat(filepath.Join(repoRoot, ks.Build.Context, dockerfile)); err != nil {
				t.Errorf("keepstate build: %v", err)
			}
			port := httpPort(t, cfg)
			if !ks.publishes(7001, port) {
				t.Errorf("keepstate ports %v: want 7001:%d (the http-addr port)", ks.Ports, port)
			}
			if v := f.namedVolumeAt(ks, cfg.DataDir); cfg.Store == app.StoreClover && v == "" {
				t.Errorf("keepstate volumes %v: no declared named volume at the data dir %q", ks.Volumes, cfg.DataDir)
			}

			// Every address keepstate is given is a service it waits for
			// (healthy) and a port that service listens on.
			var endpoints []string
			endpoints = append(endpoints, cfg.Brokers...)
			u, err := url.Parse(cfg.SchemaRegistry)
			if err != nil {
				t.Fatalf("schema registry %q: %v", cfg.SchemaRegistry, err)
			}
			endpoints = append(endpoints, u.Host)
			if cfg.Store == app.StoreRedis {
				u, err := url.Parse(cfg.RedisURL)
				if err != nil {
					t.Fatalf("redis url %q: %v", cfg.RedisURL, err)
				}
				endpoints = append(endpoints, u.Host)
			}
			for _, ep := range endpoints {
				host, p, err := net.SplitHostPort(ep)
				if err != nil {
					t.Errorf("endpoint %q: %v", ep, err)
					continue
				}
				if _, ok := f.Services[host]; !ok {
					t.Errorf("endpoint %q: %q is not a service", ep, host)
					continue
				}
				if ks.DependsOn[host].Condition != "service_healthy" {
					t.Errorf("keepstate uses %s but does not depend on it with condition service_healthy", host)
				}
				n, _ := strconv.Atoi(p)
				if listen := f.listenPorts(t, host); !slices.Contains(listen, n) {
					t.Errorf("endpoint %q: %s listens on %v inside the network", ep, host, listen)
				}
			}

			if host, p, err := net.SplitHostPort(cfg.AdvertiseAddr); err != nil || f.Services[host] != ks || p != strconv.Itoa(port) {
				t.Errorf("keepstate advertise-addr %q, want keepstate:%d (its service name and API port)", cfg.AdvertiseAddr, port)
			}
			checkComposeKeepstateHealth(t, ks, port)
			need := web.DefaultShutdownTimeout + finalFlushBound + cfg.CommitInterval
			if d, err := time.ParseDuration(ks.StopGracePeriod); err != nil || d < need {
				t.Errorf("keepstate stop_grace_period %q, want at least %v (HTTP shutdown + final flush)", ks.StopGracePeriod, need)
			}
		})
	}
}

// checkComposeHealthDeps: every depends_on waits for health, and the
// service waited for has a health check.
func checkComposeHealthDeps(t *testing.T, f composeFile) {
	t.Helper()
	for name, s := range f.Services {
		for dep, cond := range s.DependsOn {
			d, ok := f.Services[dep]
			if !ok {
				t.Errorf("%s depends on unknown service %q", name, dep)
				continue
			}
			if cond.Condition != "service_healthy" {
				t.Errorf("%s depends on %s with condition %q, want service_healthy", name, dep, cond.Condition)
			}
			if d.Healthcheck == nil || len(d.Healthcheck.Test) == 0 {
				t.Errorf("%s waits for %s to be healthy but %s has no healthcheck", name, dep, dep)
			}
		}
	}
}

func checkComposeKafka(t *testing.T, f composeFile) {
	t.Helper()
	k := f.service(t, "kafka")
	if !strings.HasPrefix(k.Image, "apache/kafka:") {
		t.Errorf("kafka image %q, want apache/kafka", k.Image)
	}
	env := k.env()
	roles := strings.Split(env["KAFKA_PROCESS_ROLES"], ",")
	if !slices.Contains(roles, "broker") || !slices.Contains(roles, "controller") {
		t.Errorf("KAFKA_PROCESS_ROLES %q: want broker,controller (KRaft)", env["KAFKA_PROCESS_ROLES"])
	}
	if id, err := base64.RawURLEncoding.DecodeString(env["CLUSTER_ID"]); err != nil || len(id) != 16 {
		t.Errorf("CLUSTER_ID %q is not a base64 UUID (kafka-storage format refuses it)", env["CLUSTER_ID"])
	}
	for name := range f.Services {
		if strings.Contains(name, "zookeeper") {
			t.Errorf("service %q: KRaft needs no ZooKeeper", name)
		}
	}
	// The host reaches the broker on 9092 and is told localhost:9092.
	if !k.publishes(9092, 9092) || !strings.Contains(env["KAFKA_ADVERTISED_LISTENERS"], "//localhost:9092") {
		t.Errorf("kafka: want 9092:9092 published and advertised as localhost:9092, got ports %v, listeners %q", k.Ports, env["KAFKA_ADVERTISED_LISTENERS"])
	}
	if v := f.namedVolumeAt(k, env["KAFKA_LOG_DIRS"]); v == "" {
		t.Errorf("kafka: no named volume at KAFKA_LOG_DIRS %q", env["KAFKA_LOG_DIRS"])
	}
}

func checkComposeRegistry(t *testing.T, f composeFile) {
	t.Helper()
	sr := f.service(t, "schema-registry")
	if !strings.HasPrefix(sr.Image, "confluentinc/cp-schema-registry:") {
		t.Errorf("schema-registry image %q, want confluentinc/cp-schema-registry", sr.Image)
	}
	if listen := f.listenPorts(t, "schema-registry"); !slices.Contains(listen, 8081) || !sr.publishes(8081, 8081) {
		t.Errorf("schema-registry listens on %v, publishes %v: want 8081 and 8081:8081", listen, sr.Ports)
	}
	kafkaPorts := f.listenPorts(t, "kafka")
	for _, b := range strings.Split(sr.env()["SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS"], ",") {
		u, err := url.Parse(strings.TrimSpace(b))
		n, _ := strconv.Atoi(u.Port())
		if err != nil || u.Hostname() != "kafka" || !slices.Contains(kafkaPorts, n) {
			t.Errorf("schema-registry bootstrap %q: want kafka on one of %v", b, kafkaPorts)
		}
	}
}

func checkComposeRedis(t *testing.T, f composeFile) {
	t.Helper()
	r := f.service(t, "redis")
	if !strings.HasPrefix(r.Image, "redis:7") {
		t.Errorf("redis image %q, want redis:7", r.Image)
	}
	if cmd := strings.Join(r.Command, " "); !strings.Contains(cmd, "--appendonly yes") {
		t.Errorf("redis command %q: AOF not on", cmd)
	}
	dir := "/data" // the redis image's working directory
	for i, a := range r.Command {
		if a == "--dir" && i+1 < len(r.Command) {
			dir = r.Command[i+1]
		}
	}
	if f.namedVolumeAt(r, dir) == "" {
		t.Errorf("redis: no named volume at %s", dir)
	}
}

// checkComposeKeepstateHealth: the health check asks the API port for a
// route that answers 200.
func checkComposeKeepstateHealth(t *testing.T, ks *composeService, port int) {
	t.Helper()
	if ks.Healthcheck == nil {
		t.Errorf("keepstate has no healthcheck")
		return
	}
	var target *url.URL
	for _, w := range ks.Healthcheck.Test {
		if u, err := url.Parse(w); err == nil && u.Scheme == "http" {
			target = u
		}
	}
	if target == nil {
		t.Errorf("keepstate healthcheck %q asks no http URL", ks.Healthcheck.Test)
		return
	}
	if n, _ := strconv.Atoi(target.Port()); n != port {
		t.Errorf("keepstate healthcheck port %s, want the http-addr port %d", target.Port(), port)
	}
	if ready, _ := probeStatus(t, target.Path); ready != 200 {
		t.Errorf("keepstate healthcheck path %q answers %d, want 200", target.Path, ready)
	}
}

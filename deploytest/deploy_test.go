package deploytest

// Consistency of the k8s/ overlays with the program: settings are flags and
// validate, the volume sits at the data dir, probes use real routes on the
// API port, Services and the PDB select the pods, the redis overlay has no
// keepstate PVC and points at its Redis. The helpers configFromEnv,
// httpPort and probeStatus are shared with compose_test.go and
// image_test.go.

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/cli"
	"github.com/keepstate/keepstate/web"
)

// repoRoot is the repository root (the main module) relative to this
// package.
const repoRoot = ".."

// finalFlushBound is how long the engine's last flush of a partition may
// take on shutdown (engine's unexported finalFlushTimeout).
const finalFlushBound = 30 * time.Second

// configFromEnv applies env (KEEPSTATE_* name → value) to a flag set built
// exactly as `keepstate run` builds it (cli.CommonFlags on app.Default) and
// returns the resulting, validated Config.
// A name that is not the environment variable of a flag fails the test.
func configFromEnv(t *testing.T, where string, env map[string]string) app.Config {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfg := app.Default()
	cli.CommonFlags(fs, &cfg)
	byEnv := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { byEnv[cli.EnvName(f.Name)] = f.Name })
	for name, value := range env {
		flagName, ok := byEnv[name]
		if !ok {
			t.Errorf("%s: %s is not the environment variable of any flag", where, name)
			continue
		}
		if err := fs.Set(flagName, value); err != nil {
			t.Errorf("%s: %s=%q: %v", where, name, value, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("%s: configuration does not validate: %v", where, err)
	}
	return cfg
}

// httpPort returns the port of cfg.HTTPAddr.
func httpPort(t *testing.T, cfg app.Config) int {
	t.Helper()
	_, p, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil {
		t.Fatalf("http-addr %q: %v", cfg.HTTPAddr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("http-addr %q: port: %v", cfg.HTTPAddr, err)
	}
	return n
}

// probeStatus answers path on the real web server, once ready and once not
// ready, and returns both status codes.
func probeStatus(t *testing.T, path string) (ready, notReady int) {
	t.Helper()
	get := func(readyErr error) int {
		srv := web.New(web.Options{Ready: func() error { return readyErr }})
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	return get(nil), get(errors.New("partition 3 restoring"))
}

// checkLivenessPath: the path answers 200 even while the instance is not
// ready, so a pod restoring its store is not killed.
func checkLivenessPath(t *testing.T, where, path string) {
	t.Helper()
	ready, notReady := probeStatus(t, path)
	if ready != http.StatusOK || notReady != http.StatusOK {
		t.Errorf("%s: liveness path %q answers %d ready / %d not ready, want 200 / 200", where, path, ready, notReady)
	}
}

// checkReadinessPath: the path answers 200 when ready and 503 when not.
func checkReadinessPath(t *testing.T, where, path string) {
	t.Helper()
	ready, notReady := probeStatus(t, path)
	if ready != http.StatusOK || notReady != http.StatusServiceUnavailable {
		t.Errorf("%s: readiness path %q answers %d ready / %d not ready, want 200 / 503", where, path, ready, notReady)
	}
}

func TestKustomizeOverlays(t *testing.T) {
	docker := parseDockerfile(t)
	tests := []struct {
		overlay string
		store   string
	}{
		{overlay: "clover", store: app.StoreClover},
		{overlay: "redis", store: app.StoreRedis},
	}
	for _, tt := range tests {
		t.Run(tt.overlay, func(t *testing.T) {
			r := render(t, filepath.Join(repoRoot, "k8s", "overlays", tt.overlay))
			var sts statefulSet
			r.spec(t, "StatefulSet", "keepstate", &sts)
			pod := sts.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("keepstate pod has %d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			podName := "keepstate-0" // StatefulSet pods are <name>-<ordinal>
			cfg := checkEnv(t, r, c, podName)
			checkAdvertise(t, sts, cfg, podName)
			if cfg.Store != tt.store {
				t.Errorf("store = %q, want %q", cfg.Store, tt.store)
			}
			checkPodBasics(t, sts, c, cfg, docker)
			checkServices(t, r, sts, c, cfg)
			switch tt.store {
			case app.StoreClover:
				checkCloverVolume(t, sts, c, cfg, docker)
			case app.StoreRedis:
				checkNoKeepstatePVC(t, r, sts, c, cfg)
				checkRedis(t, r, cfg)
			}
		})
	}
}

// checkEnv collects the container's KEEPSTATE_* variables (ConfigMap and
// env, the pod name being podName), requires each to be a flag and returns
// the Config they produce.
func checkEnv(t *testing.T, r rendered, c container, podName string) app.Config {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Errorf("envFrom without configMapRef")
			continue
		}
		cm, ok := r["ConfigMap"][ef.ConfigMapRef.Name]
		if !ok {
			t.Fatalf("envFrom names ConfigMap %q, which is not rendered (have %v)", ef.ConfigMapRef.Name, names(r["ConfigMap"]))
		}
		for k, v := range cm.Data {
			env[k] = v
		}
	}
	if len(env) == 0 {
		t.Fatalf("keepstate gets no settings from a ConfigMap")
	}
	instanceFromPod := false
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			instanceFromPod = instanceFromPod || e.Name == cli.EnvName("instance-id")
			env[e.Name] = podName
		case e.ValueFrom != nil:
			t.Errorf("env %s: only fieldRef metadata.name is modelled by this test", e.Name)
		default:
			v, err := expandVars(e.Value, env)
			if err != nil {
				t.Errorf("env %s=%q: %v", e.Name, e.Value, err)
			}
			env[e.Name] = v
		}
	}
	if !instanceFromPod {
		t.Errorf("%s is not set from the pod name (fieldRef metadata.name)", cli.EnvName("instance-id"))
	}
	return configFromEnv(t, "keepstate container", env)
}

// expandVars expands $(NAME) references to earlier variables the way the
// kubelet does ($$ escapes a dollar); an undefined reference is an error
// here, since the kubelet would pass it through literally.
func expandVars(s string, env map[string]string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "$")
		if i < 0 || i == len(s)-1 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			s = s[i+2:]
		case '(':
			end := strings.IndexByte(s[i:], ')')
			if end < 0 {
				return "", fmt.Errorf("unterminated $( in %q", s)
			}
			name := s[i+2 : i+end]
			v, ok := env[name]
			if !ok {
				return "", fmt.Errorf("$(%s) is not defined before it", name)
			}
			b.WriteString(v)
			s = s[i+end+1:]
		default:
			b.WriteByte('$')
			s = s[i+1:]
		}
	}
}

// checkAdvertise: other instances reach this one by its stable DNS name
// under the headless Service, on the API port.
func checkAdvertise(t *testing.T, sts statefulSet, cfg app.Config, podName string) {
	t.Helper()
	host, port, err := net.SplitHostPort(cfg.AdvertiseAddr)
	if err != nil {
		t.Fatalf("advertise-addr %q: %v", cfg.AdvertiseAddr, err)
	}
	if want := podName + "." + sts.ServiceName; host != want && !strings.HasPrefix(host, want+".") {
		t.Errorf("advertise-addr host %q, want the pod's DNS name %s[.<namespace>.svc...]", host, want)
	}
	if port != strconv.Itoa(httpPort(t, cfg)) {
		t.Errorf("advertise-addr port %s, want the http-addr port %d", port, httpPort(t, cfg))
	}
}

func checkPodBasics(t *testing.T, sts statefulSet, c container, cfg app.Config, docker dockerfile) {
	t.Helper()
	pod := sts.Template.Spec
	if !selects(sts.Selector.MatchLabels, sts.Template.Metadata.Labels) {
		t.Errorf("StatefulSet selector %v does not select its pods %v", sts.Selector.MatchLabels, sts.Template.Metadata.Labels)
	}
	port := httpPort(t, cfg)
	httpPorts := 0
	for _, p := range c.Ports {
		if p.ContainerPort == port {
			httpPorts++
		}
	}
	if httpPorts != 1 {
		t.Errorf("container ports %+v: want exactly one on the http-addr port %d", c.Ports, port)
	}
	if docker.expose != port {
		t.Errorf("Dockerfile EXPOSE %d, k8s http-addr port %d", docker.expose, port)
	}
	probes := []struct {
		name  string
		p     *probe
		check func(*testing.T, string, string)
	}{
		{"readinessProbe", c.ReadinessProbe, checkReadinessPath},
		{"livenessProbe", c.LivenessProbe, checkLivenessPath},
		{"startupProbe", c.StartupProbe, nil},
	}
	for _, pr := range probes {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("%s: missing or not httpGet", pr.name)
			continue
		}
		if got := portOf(t, pr.p.HTTPGet.Port, c); got != port {
			t.Errorf("%s port = %d, want the http-addr port %d", pr.name, got, port)
		}
		if pr.check != nil {
			pr.check(t, pr.name, pr.p.HTTPGet.Path)
		} else if ready, _ := probeStatus(t, pr.p.HTTPGet.Path); ready != http.StatusOK {
			t.Errorf("%s path %q answers %d when ready, want 200", pr.name, pr.p.HTTPGet.Path, ready)
		}
	}
	if sp := c.StartupProbe; sp != nil {
		// A full changelog restore of a large partition takes minutes: the
		// startup window must be long, and longer than liveness allows.
		window := time.Duration(sp.PeriodSeconds*sp.FailureThreshold) * time.Second
		if window < 15*time.Minute {
			t.Errorf("startup probe window = %v, want at least 15m for a full changelog restore", window)
		}
		if lp := c.LivenessProbe; lp != nil && window <= time.Duration(lp.PeriodSeconds*lp.FailureThreshold)*time.Second {
			t.Errorf("startup window %v is not longer than the liveness window", window)
		}
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil {
		t.Errorf("terminationGracePeriodSeconds not set")
	} else if grace, need := time.Duration(*g)*time.Second, web.DefaultShutdownTimeout+finalFlushBound+cfg.CommitInterval; grace < need {
		t.Errorf("terminationGracePeriodSeconds = %v, want at least %v (HTTP shutdown + final flush)", grace, need)
	}
	for _, res := range []string{"cpu", "memory"} {
		if c.Resources.Requests[res] == "" {
			t.Errorf("no %s request", res)
		}
	}
	sc := pod.SecurityContext
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("pod securityContext.runAsNonRoot is not true")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod securityContext.runAsUser unset or root")
	} else if *sc.RunAsUser != docker.uid {
		t.Errorf("runAsUser = %d, Dockerfile USER %d", *sc.RunAsUser, docker.uid)
	}
	if p := c.SecurityContext.ReadOnlyRootFilesystem; p == nil || !*p {
		t.Errorf("readOnlyRootFilesystem is not true")
	}
	if p := c.SecurityContext.AllowPrivilegeEscalation; p == nil || *p {
		t.Errorf("allowPrivilegeEscalation is not false")
	}
}

// checkServices: a ClusterIP Service for the API and the headless Service
// governing the StatefulSet, both on the http port, plus a PDB, all
// selecting the keepstate pods.
func checkServices(t *testing.T, r rendered, sts statefulSet, c container, cfg app.Config) {
	t.Helper()
	podLabels := sts.Template.Metadata.Labels
	port := httpPort(t, cfg)
	var api, headless int
	for name := range r["Service"] {
		var s service
		r.spec(t, "Service", name, &s)
		if !selects(s.Selector, podLabels) {
			continue
		}
		for _, p := range s.Ports {
			if got := portOf(t, p.TargetPort, c); got != port {
				t.Errorf("Service %s port %s targets %d, want %d", name, p.Name, got, port)
			}
		}
		if s.ClusterIP == "None" {
			headless++
			if name != sts.ServiceName {
				t.Errorf("headless Service %q is not the StatefulSet's serviceName %q", name, sts.ServiceName)
			}
		} else {
			api++
		}
	}
	if api != 1 || headless != 1 {
		t.Errorf("Services selecting keepstate: %d ClusterIP and %d headless, want 1 and 1", api, headless)
	}
	var budgets int
	for name := range r["PodDisruptionBudget"] {
		var p pdb
		r.spec(t, "PodDisruptionBudget", name, &p)
		if selects(p.Selector.MatchLabels, podLabels) {
			budgets++
		}
	}
	if budgets != 1 {
		t.Errorf("%d PodDisruptionBudgets select keepstate, want 1", budgets)
	}
}

func checkCloverVolume(t *testing.T, sts statefulSet, c container, cfg app.Config, docker dockerfile) {
	t.Helper()
	if len(sts.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volumeClaimTemplates, want 1", len(sts.VolumeClaimTemplates))
	}
	claim := sts.VolumeClaimTemplates[0].Metadata.Name
	var mounted []string
	for _, m := range c.VolumeMounts {
		if m.Name == claim {
			mounted = append(mounted, m.MountPath)
		}
	}
	if len(mounted) != 1 || filepath.Clean(mounted[0]) != filepath.Clean(cfg.DataDir) {
		t.Errorf("claim %q mounted at %v, want once at the data dir %q", claim, mounted, cfg.DataDir)
	}
	if docker.env["KEEPSTATE_DATA_DIR"] != cfg.DataDir {
		t.Errorf("Dockerfile KEEPSTATE_DATA_DIR = %q, k8s data dir %q", docker.env["KEEPSTATE_DATA_DIR"], cfg.DataDir)
	}
	if modes := sts.VolumeClaimTemplates[0].Spec.AccessModes; len(modes) != 1 || modes[0] != "ReadWriteOnce" {
		t.Errorf("claim access modes %v, want [ReadWriteOnce] (one store per instance)", modes)
	}
	if g := sts.Template.Spec.SecurityContext.FSGroup; g == nil {
		t.Errorf("no pod fsGroup: the non-root user cannot write the volume")
	}
}

func checkNoKeepstatePVC(t *testing.T, r rendered, sts statefulSet, c container, cfg app.Config) {
	t.Helper()
	if n := len(sts.VolumeClaimTemplates); n != 0 {
		t.Errorf("keepstate has %d volumeClaimTemplates, want none with redis", n)
	}
	for _, v := range sts.Template.Spec.Volumes {
		if len(v.PersistentVolumeClaim) > 0 {
			t.Errorf("keepstate pod volume %q is a PVC", v.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) == filepath.Clean(cfg.DataDir) {
			t.Errorf("keepstate still mounts %q at the data dir", m.Name)
		}
	}
	if n := len(r["PersistentVolumeClaim"]); n != 0 {
		t.Errorf("%d PersistentVolumeClaim objects rendered, want 0", n)
	}
}

// checkRedis: the Redis URL names a Service of the overlay that targets a
// Redis StatefulSet with AOF on its own claim.
func checkRedis(t *testing.T, r rendered, cfg app.Config) {
	t.Helper()
	u, err := url.Parse(cfg.RedisURL)
	if err != nil {
		t.Fatalf("redis url %q: %v", cfg.RedisURL, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("redis url %q has no port: %v", cfg.RedisURL, err)
	}
	var svc service
	r.spec(t, "Service", u.Hostname(), &svc)
	var redis statefulSet
	found := false
	for name := range r["StatefulSet"] {
		var s statefulSet
		r.spec(t, "StatefulSet", name, &s)
		if selects(svc.Selector, s.Template.Metadata.Labels) {
			redis, found = s, true
			if name == "keepstate" {
				t.Errorf("Service %s selects keepstate", u.Hostname())
			}
		}
	}
	if !found {
		t.Fatalf("Service %s selects no StatefulSet", u.Hostname())
	}
	c := redis.Template.Spec.Containers[0]
	target := -1
	for _, p := range svc.Ports {
		if p.Port == port {
			target = portOf(t, p.TargetPort, c)
		}
	}
	if target != 6379 {
		t.Errorf("Service %s port %d targets %d, want redis port 6379", u.Hostname(), port, target)
	}
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "--appendonly yes") {
		t.Errorf("redis args %q: AOF not on", args)
	}
	dir := "/data"
	for i, a := range c.Args {
		if a == "--dir" && i+1 < len(c.Args) {
			dir = c.Args[i+1]
		}
	}
	if len(redis.VolumeClaimTemplates) != 1 {
		t.Fatalf("redis has %d volumeClaimTemplates, want 1", len(redis.VolumeClaimTemplates))
	}
	claim := redis.VolumeClaimTemplates[0].Metadata.Name
	ok := false
	for _, m := range c.VolumeMounts {
		ok = ok || (m.Name == claim && filepath.Clean(m.MountPath) == filepath.Clean(dir))
	}
	if !ok {
		t.Errorf("redis claim %q is not mounted at its --dir %q", claim, dir)
	}
}

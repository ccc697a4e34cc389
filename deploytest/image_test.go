package deploytest

// The container image: the Dockerfile agrees with the program and the k8s
// manifests, .dockerignore keeps the sources in the build context, and the
// Dockerfile's build command yields a statically linked binary.

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dockerfile holds what the tests compare from the Dockerfile.
type dockerfile struct {
	goVersion  string            // ARG GO_VERSION default
	buildImage string            // FROM of the first stage
	buildRun   string            // the RUN line with `go build`
	uid        int64             // USER of the final stage
	expose     int               // EXPOSE of the final stage
	env        map[string]string // ENV of the final stage
	volume     string            // VOLUME of the final stage
	entrypoint []string          // ENTRYPOINT of the final stage
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatalf("open Dockerfile: %v", err)
	}
	defer func() { _ = f.Close() }()
	d := dockerfile{env: map[string]string{}, uid: -1}
	stage := -1
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if line == "" && (text == "" || strings.HasPrefix(text, "#")) {
			continue
		}
		if strings.HasSuffix(text, "\\") {
			line += strings.TrimSuffix(text, "\\") + " "
			continue
		}
		line += text
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		line = ""
		switch strings.ToUpper(instr) {
		case "ARG":
			if k, v, ok := strings.Cut(rest, "="); ok && k == "GO_VERSION" {
				d.goVersion = v
			}
		case "FROM":
			stage++
			if stage == 0 {
				d.buildImage = strings.Fields(rest)[0]
			}
			// Only the final stage's settings count.
			d.env, d.uid, d.expose, d.volume, d.entrypoint = map[string]string{}, -1, 0, "", nil
		case "RUN":
			if strings.Contains(rest, "go build") {
				d.buildRun = rest
			}
		case "USER":
			u, _, _ := strings.Cut(rest, ":")
			if n, err := strconv.ParseInt(u, 10, 64); err == nil {
				d.uid = n
			} else {
				t.Errorf("Dockerfile USER %q is not numeric (Kubernetes cannot verify runAsNonRoot)", rest)
			}
		case "EXPOSE":
			d.expose, _ = strconv.Atoi(strings.TrimSuffix(rest, "/tcp"))
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				d.env[k] = v
			}
		case "VOLUME":
			var vols []string
			if err := json.Unmarshal([]byte(rest), &vols); err != nil || len(vols) != 1 {
				t.Errorf("Dockerfile VOLUME %s: want a JSON array of one path", rest)
			} else {
				d.volume = vols[0]
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				t.Errorf("Dockerfile ENTRYPOINT %s: want exec (JSON) form: %v", rest, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read Dockerfile: %v", err)
	}
	return d
}

func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t)
	if !strings.HasPrefix(d.buildImage, "golang:") {
		t.Errorf("build stage FROM %q, want a golang image", d.buildImage)
	}
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goLine string
	for _, l := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goLine = strings.TrimSpace(v)
		}
	}
	if d.goVersion == "" || !strings.HasPrefix(goLine+".", d.goVersion+".") {
		t.Errorf("Dockerfile GO_VERSION %q does not match go.mod's go %s", d.goVersion, goLine)
	}
	if !strings.Contains(d.buildRun, "CGO_ENABLED=0") || !strings.Contains(d.buildRun, "./cmd/keepstate") {
		t.Errorf("build RUN %q: want CGO_ENABLED=0 go build ... ./cmd/keepstate", d.buildRun)
	}
	if d.uid <= 0 {
		t.Errorf("final stage USER uid = %d, want a non-root numeric user", d.uid)
	}
	if port := httpPort(t, configFromEnv(t, "Dockerfile ENV", d.env)); d.expose != port {
		t.Errorf("EXPOSE %d, want the http-addr port %d", d.expose, port)
	}
	if d.volume == "" || d.volume != d.env["KEEPSTATE_DATA_DIR"] {
		t.Errorf("VOLUME %q, KEEPSTATE_DATA_DIR %q: want the same path", d.volume, d.env["KEEPSTATE_DATA_DIR"])
	}
	if n := len(d.entrypoint); n != 2 || filepath.Base(d.entrypoint[0]) != "keepstate" || d.entrypoint[1] != "run" {
		t.Errorf("ENTRYPOINT %q, want [<path>/keepstate run]", d.entrypoint)
	}
}

// TestDockerignoreKeepsSources: nothing the build needs is left out of the
// build context.
func TestDockerignoreKeepsSources(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		p := strings.TrimSpace(l)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if p == "go.mod" || p == "go.sum" || p == "*.go" || p == "**/*.go" {
			t.Errorf(".dockerignore excludes %q, which the build needs", p)
		}
		matches, err := filepath.Glob(filepath.Join(repoRoot, p))
		if err != nil {
			t.Errorf(".dockerignore pattern %q: %v", p, err)
			continue
		}
		for _, m := range matches {
			if hasGoSource(t, m) {
				t.Errorf(".dockerignore %q excludes %s, which holds Go sources", p, m)
			}
		}
	}
}

func hasGoSource(t *testing.T, root string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return found
}

// TestStaticBuild runs the Dockerfile's build command and checks that the
// binary is statically linked, as the runtime image (no C library
// guarantees) needs.
func TestStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	d := parseDockerfile(t)
	words, err := splitShell(d.buildRun)
	if err != nil {
		t.Fatalf("build RUN %q: %v", d.buildRun, err)
	}
	out := filepath.Join(t.TempDir(), "keepstate")
	var env, args []string
	i := 0
	for ; i < len(words) && strings.Contains(words[i], "=") && words[i][0] != '-'; i++ {
		env = append(env, words[i])
	}
	if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
		t.Fatalf("build RUN %q: want [VAR=value ...] go build ...", d.buildRun)
	}
	for j := i + 2; j < len(words); j++ {
		switch w := words[j]; {
		case w == "-o" && j+1 < len(words):
			args = append(args, "-o", out)
			j++
		case w == "./cmd/keepstate":
			args = append(args, "./cmd/keepstate")
		default:
			args = append(args, w)
		}
	}
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %q: %v\n%s", env, cmd.Args, err, b)
	}
	t.Logf("built %v in %v", cmd.Args, time.Since(start).Round(time.Millisecond))

	f, err := elf.Open(out)
	if err != nil {
		t.Fatalf("open built binary: %v", err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("binary has a PT_INTERP program header: dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil {
		t.Errorf("read DT_NEEDED: %v", err)
	} else if len(libs) != 0 {
		t.Errorf("binary needs shared libraries %v", libs)
	}
}

// splitShell splits a command line into words, honouring single and double
// quotes (no expansions): enough for the Dockerfile's build line.
func splitShell(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == '&' || r == ';' || r == '|':
			return nil, fmt.Errorf("shell operator %q: keep the build a single command", r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

//go:build unix

package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// screenshotEnv names a PNG path; when set, TestChromiumDashboard also
// saves a screenshot of the dashboard there (for a human to look at).
const screenshotEnv = "KEEPSTATE_WEB_SCREENSHOT"

// startForBrowser serves s on a loopback port until the test ends and
// returns its base URL.
func startForBrowser(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// chromium runs headless Chromium with args plus the common flags and
// returns its standard output. A missing chromium skips the test (or fails
// it when services are required).
func chromium(t *testing.T, args ...string) string {
	t.Helper()
	bin := testkit.LookPath(t, "chromium", "apt-get install chromium")
	tmp := t.TempDir()
	common := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + filepath.Join(tmp, "profile"),
		"--virtual-time-budget=5000",
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(common, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+tmp)
	cmd.Dir = tmp
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Chromium starts helper processes: run it in its own process group and
	// kill the whole group (only it) on timeout and afterwards.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	t.Logf("chromium %s: %v", args[len(args)-1], time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("chromium %v: %v\nstderr:\n%s", args, err, tail(stderr.String(), 3000))
	}
	return stdout.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestChromiumDashboard renders the dashboard in a real browser and checks
// that its script filled in the counters, readiness, the top movies and a
// lookup from the server's data.
func TestChromiumDashboard(t *testing.T) {
	var ms []movieStats
	for i := int64(1); i <= 25; i++ {
		// Averages 9.96, 9.92, ... with distinct counts; ids not in order.
		ms = append(ms, mv(1000+(i*37)%101, i+100, float64(i+100)*(10-0.04*float64(i))))
	}
	fq := newFake(ms...)
	stats := engine.Stats{
		RecordsProcessed: 1234567, RecordsRekeyed: 2345678, DuplicatesSkipped: 4321, DeadLettered: 17,
		ChangelogRestored: 98765, StoreBatches: 5555, StoreDocsWritten: 77777, FencedWrites: 3,
		PartitionsAssigned: 4, PartitionsRunning: 3, ChangelogSkipped: 2, ReadLeaseLapses: 5,
	}
	roles := map[string][]engine.PartitionRole{"movies": {
		{Partition: 0, Role: engine.RoleActive, State: "RUNNING", Replayed: 12},
		{Partition: 2, Role: engine.RoleWarmup, LagRecords: 45678, LagMs: 150, Replayed: 1234567, ReplayPerSec: 345678.4},
	}}
	s := New(Options{
		Tables: []Table{fq},
		Stats:  func() engine.Stats { return stats },
		Ready:  func() error { return errors.New("1 of 4 partitions restoring") },
		Roles:  func() map[string][]engine.PartitionRole { return roles },
	})
	base := startForBrowser(t, s)
	lookup := fq.movies[7]
	dom := chromium(t, "--dump-dom", base+fmt.Sprintf("/?movie=%d", lookup.MovieID))

	var want []string
	for field, v := range map[string]int64{
		"recordsProcessed": stats.RecordsProcessed, "recordsRekeyed": stats.RecordsRekeyed,
		"duplicatesSkipped": stats.DuplicatesSkipped, "deadLettered": stats.DeadLettered,
		"changelogRestored": stats.ChangelogRestored, "storeBatches": stats.StoreBatches,
		"storeDocsWritten": stats.StoreDocsWritten, "fencedWrites": stats.FencedWrites,
		"partitionsAssigned": stats.PartitionsAssigned, "partitionsRunning": stats.PartitionsRunning,
		"changelogSkipped": stats.ChangelogSkipped, "readLeaseLapses": stats.ReadLeaseLapses,
	} {
		want = append(want, fmt.Sprintf(`data-stat="%s">%s<`, field, commas(v)))
	}
	want = append(want, `class="badge notready"`, "not ready: 1 of 4 partitions restoring",
		`<tr><td>movies</td><td class="num">0</td><td>active</td><td>RUNNING</td><td class="num"></td><td class="num"></td><td class="num">12</td><td class="num">0</td></tr>`,
		`<tr><td>movies</td><td class="num">2</td><td>warmup</td><td></td><td class="num">45,678</td><td class="num">150</td><td class="num">1,234,567</td><td class="num">345,678</td></tr>`)
	for i, m := range fq.movies[:20] {
		want = append(want, fmt.Sprintf("<tr><td>%d</td><td>%d</td><td>%.2f</td><td>%s</td></tr>", i+1, m.MovieID, m.Avg(), commas(m.Count)))
	}
	want = append(want,
		fmt.Sprintf(`<dd id="lookup-id">%d</dd>`, lookup.MovieID),
		fmt.Sprintf(`<dd id="lookup-rating">%.2f</dd>`, lookup.Avg()),
		fmt.Sprintf(`<dd id="lookup-count">%s</dd>`, commas(lookup.Count)),
		// The default query, on the first table (movies): its avg index,
		// descending, which the movie table answers.
		`<tr id="query-head"><th>#</th><th>Key</th><th>avg</th><th>Value</th></tr>`,
		fmt.Sprintf(`<tr><td>1</td><td>%d</td><td class="num">%s</td>`, fq.movies[0].MovieID, strconv.FormatFloat(fq.movies[0].Avg(), 'f', -1, 64)),
		fmt.Sprintf(`<tr><td>20</td><td>%d</td><td class="num">`, fq.movies[19].MovieID),
	)
	if strings.Contains(dom, "Query failed") {
		t.Errorf("the default table query failed")
	}
	for _, w := range want {
		if !strings.Contains(dom, w) {
			t.Errorf("rendered dashboard does not contain %q", w)
		}
	}
	if m := fq.movies[20]; strings.Contains(dom, fmt.Sprintf("<td>%d</td><td>%.2f</td>", m.MovieID, m.Avg())) {
		t.Errorf("movie #21 (%d) is shown: the table must hold the top 20", m.MovieID)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", tail(dom, 6000))
	}

	if path := os.Getenv(screenshotEnv); path != "" {
		chromium(t, "--hide-scrollbars", "--window-size=1280,1000", "--screenshot="+path, base+fmt.Sprintf("/?movie=%d", lookup.MovieID))
		t.Logf("screenshot saved to %s", path)
	}
}

// TestChromiumDashboardTables renders the dashboard with two fake tables
// and checks that its script listed them (name, key kind, indexes) and ran
// the query of the deep link, showing the first page of items.
func TestChromiumDashboardTables(t *testing.T) {
	cs, sc := customers(12), scores(5)
	s := New(Options{Tables: []Table{newFake(), cs, sc}})
	base := startForBrowser(t, s)
	dom := chromium(t, "--dump-dom", base+"/?table=customers&index=total&order=desc&limit=5")

	text := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace
	want := []string{
		"<tr><td>customers</td><td>string</td><td>total (number), tier (string)</td></tr>",
		"<tr><td>scores</td><td>int64</td><td>score (number)</td></tr>",
		`<tr id="query-head"><th>#</th><th>Key</th><th>total</th><th>tier</th><th>Value</th></tr>`,
		"More documents follow: showing the first 5.",
	}
	order := wantOrder(cs, engine.IndexQuery{Index: "total", Desc: true})
	for i, d := range order[:5] {
		var value bytes.Buffer
		if err := json.Compact(&value, d.Value); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf(`<tr><td>%d</td><td>%s</td><td class="num">%s</td><td>%s</td><td class="json">%s</td></tr>`,
			i+1, text(string(d.Key)), strconv.FormatFloat(d.Index[0].Num, 'f', -1, 64), text(d.Index[1].Str), text(value.String())))
	}
	for _, w := range want {
		if !strings.Contains(dom, w) {
			t.Errorf("rendered dashboard does not contain %q", w)
		}
	}
	if d := order[5]; strings.Contains(dom, "<td>"+text(string(d.Key))+"</td>") {
		t.Errorf("item #6 (%s) is shown: the page must hold 5", d.Key)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", tail(dom, 8000))
	}
	if path := os.Getenv(screenshotEnv); path != "" {
		path = strings.TrimSuffix(path, ".png") + "-tables.png"
		chromium(t, "--hide-scrollbars", "--window-size=1280,1400", "--screenshot="+path, base+"/?table=customers&index=total&order=desc&limit=5")
		t.Logf("screenshot saved to %s", path)
	}
}

// TestChromiumSwaggerUI renders /swagger-ui/ and checks that Swagger UI
// loaded the spec from /api-docs and rendered its operations.
func TestChromiumSwaggerUI(t *testing.T) {
	base := startForBrowser(t, New(Options{Tables: []Table{newFake()}}))
	dom := chromium(t, "--dump-dom", base+"/swagger-ui/")
	doc, _ := loadSpec(t)
	// The page's static HTML has neither: only Swagger UI's rendering does.
	want := []string{`<h1 class="title">` + doc.Info.Title, `/api-docs</span>`}
	for p, ops := range doc.Paths {
		want = append(want, fmt.Sprintf(`data-path="%s"`, p))
		for _, op := range ops {
			want = append(want, op.OperationID)
		}
	}
	for _, w := range want {
		if !strings.Contains(dom, w) {
			t.Errorf("rendered Swagger UI does not contain %q", w)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", tail(dom, 6000))
	}
}

// commas formats n like the dashboard's Intl.NumberFormat("en-US").
func commas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 && r != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

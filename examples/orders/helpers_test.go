package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/internal/testkit/apptest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	removeOrdersBinary()
	if err := testkit.StopRealKafka(); err != nil {
		fmt.Fprintln(os.Stderr, "testkit:", err)
	}
	os.Exit(code)
}

// testPeerSecret authenticates routing between the instances of a test.
const testPeerSecret = "orders-test-peer-secret-0123"

// testConfig returns the example's defaults set up for one test on brokers
// (apptest.Config: unique topics and group, a fresh data dir, a short
// commit interval, an ephemeral API port).
func testConfig(t *testing.T, brokers []string) app.Config {
	t.Helper()
	return apptest.Config(t, defaultConfig(), brokers, apptest.Names{App: "orders", Input: "orders-in", Output: "totals"}, testPeerSecret)
}

// truth is what the job must end up with: every customer's totals and how
// many records were bad.
type truth struct {
	customers map[string]Totals
	bad       int
}

func newTruth() *truth { return &truth{customers: map[string]Totals{}} }

// addProduced folds the records p generates (as produceOrders sends them)
// into tr.
func (tr *truth) addProduced(p produceConfig) {
	g := newGenerator(p.Customers, p.Seed, p.BadEvery)
	for range p.Count {
		r := g.next()
		if !r.valid {
			tr.bad++
			continue
		}
		t := tr.customers[r.order.CustomerID]
		t.add(r.order)
		tr.customers[r.order.CustomerID] = t
	}
}

// atLeast returns the customers whose total is at least min, sorted.
func (tr *truth) atLeast(min float64) []string {
	var out []string
	for id, t := range tr.customers {
		if t.Total >= min {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// tableDoc is the JSON of GET /tables/customers/{id} and of one item of
// GET /tables/customers?index=...
type tableDoc struct {
	Table     string `json:"table"`
	Key       string `json:"key"`
	Partition int32  `json:"partition"`
	Version   int64  `json:"version"`
	Value     Totals `json:"value"`
	Index     struct {
		Total *float64 `json:"total"`
	} `json:"index"`
}

// tablePage is the JSON of GET /tables/customers?index=...
type tablePage struct {
	Table             string     `json:"table"`
	Index             string     `json:"index"`
	Items             []tableDoc `json:"items"`
	Next              string     `json:"next"`
	Partial           bool       `json:"partial"`
	MissingPartitions []int32    `json:"missingPartitions"`
}

// getCustomer asks api (host:port) for one customer's document.
func getCustomer(api, id string) (tableDoc, int, error) {
	var d tableDoc
	code, err := testkit.GetJSON("http://"+api+"/tables/"+CustomersTable+"/"+url.PathEscape(id), &d)
	return d, code, err
}

// checkDoc compares one document with the customer's expected totals.
func checkDoc(id string, d tableDoc, want Totals) error {
	switch {
	case d.Table != CustomersTable || d.Key != id:
		return fmt.Errorf("customer %s: document of table %q key %q", id, d.Table, d.Key)
	case d.Value != want:
		return fmt.Errorf("customer %s: got %+v, want %+v", id, d.Value, want)
	case d.Index.Total == nil || *d.Index.Total != want.Total:
		return fmt.Errorf("customer %s: index total %v, want %v", id, d.Index.Total, want.Total)
	}
	return nil
}

// checkCustomers asks for every customer of tr, the i-th one on
// apis[i % len(apis)] (so that lookups are routed between instances), and
// describes the first differences.
func checkCustomers(apis []string, tr *truth) error {
	ids := make([]string, 0, len(tr.customers))
	for id := range tr.customers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	wrong := 0
	var first error
	for i, id := range ids {
		api := apis[i%len(apis)]
		d, code, err := getCustomer(api, id)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET /tables/%s/%s on %s: status %d", CustomersTable, id, api, code)
		}
		if err == nil {
			err = checkDoc(id, d, tr.customers[id])
		}
		if err != nil {
			if wrong++; first == nil {
				first = err
			}
		}
	}
	if wrong > 0 {
		return fmt.Errorf("%d of %d customers wrong, e.g. %w", wrong, len(ids), first)
	}
	return nil
}

// queryTotalAtLeast pages through GET /tables/customers?index=total&min=min
// on api, limit documents a page, and returns the documents in order.
func queryTotalAtLeast(api string, min float64, limit int) ([]tableDoc, error) {
	var out []tableDoc
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			return nil, fmt.Errorf("more than 10000 pages")
		}
		q := url.Values{"index": {"total"}, "min": {fmt.Sprint(min)}, "limit": {fmt.Sprint(limit)}}
		if after != "" {
			q.Set("after", after)
		}
		var page tablePage
		code, err := testkit.GetJSON("http://"+api+"/tables/"+CustomersTable+"?"+q.Encode(), &page)
		switch {
		case err != nil:
			return nil, err
		case code != http.StatusOK:
			return nil, fmt.Errorf("GET /tables/%s?%s: status %d", CustomersTable, q.Encode(), code)
		case page.Partial:
			return nil, fmt.Errorf("partial answer, partitions %v missing", page.MissingPartitions)
		case len(page.Items) > limit:
			return nil, fmt.Errorf("page of %d items, limit %d", len(page.Items), limit)
		}
		out = append(out, page.Items...)
		if page.Next == "" {
			return out, nil
		}
		after = page.Next
	}
}

// checkIndex compares GET /tables/customers?index=total&min=1000 on api
// (all pages) with the truth: exactly the customers whose total is at
// least 1000, in ascending order of total (then key), with their totals.
func checkIndex(api string, tr *truth) error {
	const min = 1000
	docs, err := queryTotalAtLeast(api, min, 7)
	if err != nil {
		return err
	}
	want := tr.atLeast(min)
	got := make([]string, 0, len(docs))
	for i, d := range docs {
		got = append(got, d.Key)
		if err := checkDoc(d.Key, d, tr.customers[d.Key]); err != nil {
			return fmt.Errorf("index query: %w", err)
		}
		if i > 0 {
			p := docs[i-1]
			if p.Value.Total > d.Value.Total || (p.Value.Total == d.Value.Total && p.Key >= d.Key) {
				return fmt.Errorf("index query: %s (total %v) before %s (total %v)", p.Key, p.Value.Total, d.Key, d.Value.Total)
			}
		}
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("index query total >= %d: got %d customers, want %d (%s)", min, len(got), len(want), diffSets(got, want))
	}
	return nil
}

// diffSets describes the first members of got not in want and of want
// not in got.
func diffSets(got, want []string) string {
	in := func(s []string) map[string]bool {
		m := map[string]bool{}
		for _, v := range s {
			m[v] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var extra, missing []string
	for _, v := range got {
		if !w[v] && len(extra) < 5 {
			extra = append(extra, v)
		}
	}
	for _, v := range want {
		if !g[v] && len(missing) < 5 {
			missing = append(missing, v)
		}
	}
	return fmt.Sprintf("unexpected %v, missing %v", extra, missing)
}

// readCommitted returns every committed record of topic, as a
// read_committed consumer sees it, with testkit's oracle.
func readCommitted(brokers []string, topic string) ([]testkit.CommittedRecord, error) {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []testkit.CommittedRecord
	for _, p := range parts {
		recs, err := testkit.ReadCommittedByMarkers(ctx, client, topic, p)
		if err != nil {
			return nil, fmt.Errorf("read %s/%d: %w", topic, p, err)
		}
		out = append(out, recs...)
	}
	return out, nil
}

// checkLastTotals compares the last committed record of every key of topic
// (a changelog or the output topic: JSON Totals keyed by customer id) with
// the truth.
func checkLastTotals(brokers []string, topic string, tr *truth) error {
	recs, err := readCommitted(brokers, topic)
	if err != nil {
		return err
	}
	last := map[string]Totals{}
	for _, r := range recs {
		var t Totals
		if err := json.Unmarshal(r.Value, &t); err != nil {
			return fmt.Errorf("%s key %q at %d: %w", topic, r.Key, r.Offset, err)
		}
		last[string(r.Key)] = t
	}
	wrong := 0
	var example string
	for id, want := range tr.customers {
		if got, ok := last[id]; !ok || got != want {
			if wrong++; wrong == 1 {
				example = fmt.Sprintf("customer %s: got %+v (present %v), want %+v", id, got, ok, want)
			}
		}
	}
	if wrong > 0 || len(last) != len(tr.customers) {
		return fmt.Errorf("%s: %d of %d customers wrong (%d keys in the topic), e.g. %s", topic, wrong, len(tr.customers), len(last), example)
	}
	return nil
}

// deadLetter is one record of the dead-letter topic.
type deadLetter struct {
	value         []byte
	reason, topic string
}

// readDLQ returns the committed dead letters of topic.
func readDLQ(brokers []string, topic string) ([]deadLetter, error) {
	recs, err := readCommitted(brokers, topic)
	if err != nil {
		return nil, err
	}
	out := make([]deadLetter, 0, len(recs))
	for _, r := range recs {
		d := deadLetter{value: r.Value}
		for _, h := range r.Headers {
			switch string(h.Key) {
			case engine.HeaderDLQReason:
				d.reason = string(h.Value)
			case engine.HeaderDLQTopic:
				d.topic = string(h.Value)
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// checkDLQ checks that topic holds exactly want dead letters, each from
// input with a reason naming a bad order.
func checkDLQ(brokers []string, topic, input string, want int) error {
	dead, err := readDLQ(brokers, topic)
	if err != nil {
		return err
	}
	if len(dead) != want {
		return fmt.Errorf("%s: %d dead letters, want %d", topic, len(dead), want)
	}
	for _, d := range dead {
		if d.topic != input || !strings.Contains(d.reason, ErrBadOrder.Error()) {
			return fmt.Errorf("dead letter %q: topic %q reason %q, want topic %q and a reason with %q", d.value, d.topic, d.reason, input, ErrBadOrder)
		}
	}
	return nil
}

var ordersBin struct {
	once sync.Once
	path string
	err  error
}

// ordersBinary builds ./examples/orders once per test process (with -race
// when the test has it, so the children are checked too) and returns the
// binary's path; TestMain removes it.
func ordersBinary(t *testing.T) string {
	t.Helper()
	ordersBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "keepstate-orders-bin-")
		if err != nil {
			ordersBin.err = err
			return
		}
		ordersBin.path = filepath.Join(dir, "orders")
		args := []string{"build", "-o", ordersBin.path}
		if testkit.RaceEnabled {
			args = append(args, "-race")
		}
		// The test runs in the package directory: "." is this command.
		cmd := exec.Command("go", append(args, ".")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			ordersBin.err = fmt.Errorf("go build ./examples/orders: %w\n%s", err, out)
		}
	})
	if ordersBin.err != nil {
		t.Fatalf("%v", ordersBin.err)
	}
	return ordersBin.path
}

// removeOrdersBinary deletes what ordersBinary built.
func removeOrdersBinary() {
	if ordersBin.path != "" {
		_ = os.RemoveAll(filepath.Dir(ordersBin.path))
	}
}

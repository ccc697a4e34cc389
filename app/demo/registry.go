package demo

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// Registry is the in-process Schema Registry (srfake), an http.Handler,
// whose registrations are appended to a JSON-lines file and re-seeded on
// start, so a restarted demo decodes the records its Kafka log holds.
type Registry struct {
	reg  *srfake.Registry
	path string
	log  *slog.Logger
	mu   sync.Mutex
}

type registryEntry struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      int    `json:"id"`
	Schema  string `json:"schema"`
	Type    string `json:"type,omitempty"`
}

// NewRegistry returns a Registry persisted in path, loading the schemas
// path holds (if it exists). A nil log discards.
func NewRegistry(path string, log *slog.Logger) (*Registry, error) {
	p := &Registry{reg: srfake.NewRegistry(), path: path, log: cmp.Or(log, slog.New(slog.DiscardHandler))}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("demo registry: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	seen := map[int]bool{}
	for sc.Scan() {
		var e registryEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("demo registry %s: %w", path, err)
		}
		if seen[e.ID] {
			continue // the same schema under a second subject: registering it again yields this id
		}
		seen[e.ID] = true
		if err := seed(p.reg, e); err != nil {
			return nil, fmt.Errorf("demo registry %s: %w", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("demo registry %s: %w", path, err)
	}
	return p, nil
}

// seed calls SeedSchema, which panics on conflicting input, and turns a
// panic into an error.
func seed(reg *srfake.Registry, e registryEntry) (err error) {
	s := sr.Schema{Schema: e.Schema}
	if e.Type != "" {
		_ = s.Type.UnmarshalText([]byte(e.Type))
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("schema %d of %s: %v", e.ID, e.Subject, r)
		}
	}()
	reg.SeedSchema(e.Subject, e.Version, e.ID, s)
	return nil
}

// ServeHTTP serves the registry API and records successful registrations.
func (p *Registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/subjects/") || !strings.HasSuffix(r.URL.Path, "/versions") {
		p.reg.Handler().ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	p.reg.Handler().ServeHTTP(rec, r)
	maps.Copy(w.Header(), rec.Header())
	w.WriteHeader(rec.Code)
	body := rec.Body.Bytes()
	_, _ = w.Write(body)
	if rec.Code != http.StatusOK {
		return
	}
	var resp struct {
		ID int `json:"id"`
	}
	if json.Unmarshal(body, &resp) != nil {
		return
	}
	subject := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/subjects/"), "/versions")
	p.record(subject, resp.ID)
}

// record appends the registration of id under subject, once.
func (p *Registry) record(subject string, id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for v := 1; ; v++ {
		ss, ok := p.reg.GetSchema(subject, v)
		if !ok {
			return
		}
		if ss.ID != id {
			continue
		}
		line, err := json.Marshal(registryEntry{Subject: subject, Version: ss.Version, ID: ss.ID,
			Schema: ss.Schema.Schema, Type: ss.Type.String()})
		if err != nil {
			return
		}
		if existing, err := os.ReadFile(p.path); err == nil && bytes.Contains(existing, line) {
			return
		}
		f, err := os.OpenFile(p.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			p.log.Warn("demo registry: cannot persist schema", "err", err)
			return
		}
		_, _ = f.Write(append(line, '\n'))
		_ = f.Close()
		return
	}
}

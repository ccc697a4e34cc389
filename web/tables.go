package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// Table is one job's table as the HTTP API serves it. Implementations are
// safe for concurrent use; methods that block honour ctx.
type Table interface {
	// Spec returns the table's spec (name and declared indexes).
	Spec() engine.TableSpec
	// KeyKind names the key type: "int64" or "string".
	KeyKind() string
	// ParseKey turns a key as written in a URL (one path segment, already
	// percent-decoded) into the key bytes; an error wraps engine.ErrInvalid.
	ParseKey(s string) ([]byte, error)
	// FormatKey renders key bytes as ParseKey reads them.
	FormatKey(key []byte) string
	// ValueJSON renders a document's aggregate as a JSON object.
	ValueJSON(d engine.Doc) (json.RawMessage, error)
	// Get reads key on this instance: ErrNotFound when absent,
	// ErrUnavailable when its partition is not answered here.
	Get(ctx context.Context, key []byte) (engine.Doc, error)
	// QueryLocal answers q from the partitions this instance answers and
	// returns those partitions, sorted; every document is in one of them.
	QueryLocal(ctx context.Context, q engine.IndexQuery) (engine.DocPage, []int32, error)
	// Owner returns where key is answered: local=true here, else the
	// owner's bare host:port; ErrUnavailable while nobody runs it.
	Owner(ctx context.Context, key []byte) (addr string, local bool, err error)
	// Membership returns which instance owns each partition of the job.
	Membership(ctx context.Context) (engine.Membership, error)
	// Shared reports a store every instance shares (Redis): no routing,
	// QueryLocal covers every partition.
	Shared() bool
}

// tablesBody is the body of GET /tables.
type tablesBody struct {
	Tables []tableInfoJSON `json:"tables"`
}

// tableInfoJSON describes one table in GET /tables.
type tableInfoJSON struct {
	Name    string          `json:"name"`
	Key     string          `json:"key"`
	Indexes []indexInfoJSON `json:"indexes"`
	Routes  tableRoutesJSON `json:"routes"`
}

// indexInfoJSON is one declared index: name and kind ("number", "string").
type indexInfoJSON struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// tableRoutesJSON names the routes of one table, as URI templates.
type tableRoutesJSON struct {
	Get   string `json:"get"`
	Query string `json:"query"`
}

// tableDocJSON is one document as the API shows it.
type tableDocJSON struct {
	Table     string          `json:"table"`
	Key       string          `json:"key"`
	Partition int32           `json:"partition"`
	Version   int64           `json:"version"`
	Value     json.RawMessage `json:"value"`
	Index     indexValues     `json:"index"`
	// Stale is set on an answer from a standby copy (see findDoc).
	Stale *staleJSON `json:"stale,omitempty"`
}

// tablePageJSON is the body of GET /tables/{table}. Next is absent on the
// last page; the partitions are as on GET /movies.
type tablePageJSON struct {
	Table             string         `json:"table"`
	Index             string         `json:"index"`
	Items             []tableDocJSON `json:"items"`
	Next              string         `json:"next,omitempty"`
	Partial           bool           `json:"partial,omitempty"`
	MissingPartitions []int32        `json:"missingPartitions,omitempty"`
	// StalePartitions were answered from standby copies: maybe behind.
	StalePartitions []int32 `json:"stalePartitions,omitempty"`
}

// indexValues renders a document's index values as one JSON object whose
// members follow the spec's order: a number or a string by index kind.
type indexValues struct {
	specs []engine.IndexSpec
	vals  []engine.IndexValue
	raw   map[string]json.RawMessage // as a peer sent them, for peerItem to check
}

// UnmarshalJSON implements json.Unmarshaler: it keeps the members in raw.
func (v *indexValues) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &v.raw) }

// MarshalJSON implements json.Marshaler.
func (v indexValues) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, ix := range v.specs {
		var val any = v.vals[i].Str
		if ix.Kind == engine.IndexNumber {
			val = v.vals[i].Num
		}
		name, _ := json.Marshal(ix.Name)
		enc, err := json.Marshal(val)
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", ix.Name, err)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, name...), ':'), enc...)
	}
	return append(b, '}'), nil
}

// listTables answers GET /tables.
func (s *Server) listTables(c echo.Context) error {
	out := tablesBody{Tables: make([]tableInfoJSON, 0, len(s.tables))}
	for _, t := range s.tables {
		spec := t.Spec()
		info := tableInfoJSON{Name: spec.Name, Key: t.KeyKind(), Indexes: make([]indexInfoJSON, 0, len(spec.Indexes)),
			Routes: tableRoutesJSON{Get: "/tables/" + spec.Name + "/{key}",
				Query: "/tables/" + spec.Name + "{?index,min,max,eq,order,limit,after}"}}
		for _, ix := range spec.Indexes {
			info.Indexes = append(info.Indexes, indexInfoJSON{Name: ix.Name, Kind: ix.Kind.String()})
		}
		out.Tables = append(out.Tables, info)
	}
	return c.JSON(http.StatusOK, out)
}

// table returns the table called name, or a 404.
func (s *Server) table(name string) (Table, engine.TableSpec, error) {
	for _, t := range s.tables {
		if spec := t.Spec(); spec.Name == name {
			return t, spec, nil
		}
	}
	return nil, engine.TableSpec{}, notFound("table %s not found", quoteInput(name))
}

// isJSONObject reports whether raw is one valid JSON object.
func isJSONObject(raw []byte) bool {
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(raw)
}

// tableKeyPath splits the escaped path /tables/{table}/{key} into the table
// name and the decoded key. echo hands a parameter over decoded or not
// (whether the path holds an escaped slash), so the key is read from the
// escaped path: "%2F" is a slash of the key, "/" a path separator.
func tableKeyPath(escaped string) (table, key string, ok bool) {
	rest, found := strings.CutPrefix(escaped, "/tables/")
	rawTable, rawKey, cut := strings.Cut(rest, "/")
	if !found || !cut || rawTable == "" || rawKey == "" || strings.Contains(rawKey, "/") {
		return "", "", false
	}
	table, terr := url.PathUnescape(rawTable)
	key, kerr := url.PathUnescape(rawKey)
	return table, key, terr == nil && kerr == nil
}

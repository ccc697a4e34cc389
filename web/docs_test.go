package web

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// openAPIDoc is the part of the OpenAPI document the tests inspect.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Title string `json:"title"`
	} `json:"info"`
	Paths map[string]map[string]struct {
		OperationID string `json:"operationId"`
		Parameters  []struct {
			Name string `json:"name"`
			In   string `json:"in"`
		} `json:"parameters"`
		Responses map[string]json.RawMessage `json:"responses"`
	} `json:"paths"`
}

func loadSpec(t *testing.T) (openAPIDoc, []byte) {
	t.Helper()
	rec := get(t, New(Options{}).Handler(), "/api-docs")
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("/api-docs: status %d, Content-Type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var doc openAPIDoc
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("/api-docs is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") || doc.Info.Title == "" {
		t.Fatalf("openapi = %q, title = %q: not an OpenAPI 3 document", doc.OpenAPI, doc.Info.Title)
	}
	return doc, rec.Body.Bytes()
}

// TestOpenAPICoversRoutes checks that every route registered in echo is in
// the OpenAPI document and every operation of the document is registered.
func TestOpenAPICoversRoutes(t *testing.T) {
	doc, _ := loadSpec(t)
	registered := map[string]bool{}
	heads := map[string]bool{}
	for _, r := range New(Options{}).e.Routes() {
		if r.Method == http.MethodHead {
			// HEAD is served beside every GET; the document says so once.
			heads[openAPIPath(r.Path)] = true
			continue
		}
		registered[strings.ToLower(r.Method)+" "+openAPIPath(r.Path)] = true
	}
	for k := range registered {
		if p, ok := strings.CutPrefix(k, "get "); ok && !heads[p] {
			t.Errorf("route GET %s has no HEAD", p)
		}
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			documented[method+" "+p] = true
		}
	}
	for _, k := range sortedKeys(registered) {
		if !documented[k] {
			t.Errorf("route %s is registered but not in openapi.json", k)
		}
	}
	for _, k := range sortedKeys(documented) {
		if !registered[k] {
			t.Errorf("operation %s is in openapi.json but not registered", k)
		}
	}
	if len(registered) < 12 {
		t.Errorf("only %d routes registered: %v", len(registered), sortedKeys(registered))
	}
}

func TestOpenAPIConsistency(t *testing.T) {
	doc, raw := loadSpec(t)
	param := regexp.MustCompile(`\{([^}]+)\}`)
	opIDs := map[string]string{}
	for p, ops := range doc.Paths {
		for method, op := range ops {
			where := method + " " + p
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", where)
			} else if prev, dup := opIDs[op.OperationID]; dup {
				t.Errorf("%s: operationId %q also used by %s", where, op.OperationID, prev)
			}
			opIDs[op.OperationID] = where
			if len(op.Responses) == 0 {
				t.Errorf("%s: no responses", where)
			}
			for _, m := range param.FindAllStringSubmatch(p, -1) {
				found := false
				for _, prm := range op.Parameters {
					found = found || (prm.In == "path" && prm.Name == m[1])
				}
				if !found {
					t.Errorf("%s: path parameter %q not declared", where, m[1])
				}
			}
		}
	}
	// Every local $ref points at something that exists.
	var whole map[string]any
	if err := json.Unmarshal(raw, &whole); err != nil {
		t.Fatal(err)
	}
	for _, ref := range regexp.MustCompile(`"\$ref":\s*"([^"]+)"`).FindAllStringSubmatch(string(raw), -1) {
		var node any = whole
		for _, part := range strings.Split(strings.TrimPrefix(ref[1], "#/"), "/") {
			m, ok := node.(map[string]any)
			if !ok {
				node = nil
				break
			}
			node = m[part]
		}
		if node == nil {
			t.Errorf("$ref %s does not resolve", ref[1])
		}
	}
}

// TestOpenAPITableRoutes checks the document of the table routes against
// the code: operations, parameters (those the parser reads, as in the
// query template GET /tables shows), responses, and the members of the
// answers' schemas (the JSON names of the Go types).
func TestOpenAPITableRoutes(t *testing.T) {
	doc, raw := loadSpec(t)
	queryTemplate := tableRoutesJSON{}
	for _, tb := range decode[tablesBody](t, get(t, New(Options{Tables: []Table{customers(1)}}).Handler(), "/tables")).Tables {
		queryTemplate = tb.Routes
	}
	_, tmpl, _ := strings.Cut(queryTemplate.Query, "{?")
	queryParams := strings.Split(strings.TrimSuffix(tmpl, "}"), ",")
	tests := []struct {
		path, opID string
		params     []string // in:name
		responses  []string
	}{
		{"/tables", "listTables", nil, []string{"200"}},
		{"/tables/{table}", "queryTable", append([]string{"path:table"}, prefixed("query:", queryParams)...), []string{"200", "400", "401", "404", "500", "503"}},
		{"/tables/{table}/{key}", "getTableDoc", []string{"query:activeOnly", "path:table", "path:key"}, []string{"200", "400", "401", "404", "500", "503"}},
	}
	for _, tc := range tests {
		op, ok := doc.Paths[tc.path]["get"]
		if !ok {
			t.Errorf("GET %s is not documented", tc.path)
			continue
		}
		if op.OperationID != tc.opID {
			t.Errorf("GET %s: operationId %q, want %q", tc.path, op.OperationID, tc.opID)
		}
		var params []string
		for _, p := range op.Parameters {
			params = append(params, p.In+":"+p.Name)
		}
		if !reflect.DeepEqual(params, tc.params) && !(len(params) == 0 && len(tc.params) == 0) {
			t.Errorf("GET %s: parameters %v, want %v", tc.path, params, tc.params)
		}
		for _, code := range tc.responses {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("GET %s: response %s not documented", tc.path, code)
			}
		}
	}
	if len(queryParams) != 7 {
		t.Errorf("query template %q: want 7 parameters", queryTemplate.Query)
	}

	var whole struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &whole); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{
		"TableList": tablesBody{}, "TableInfo": tableInfoJSON{}, "TableIndex": indexInfoJSON{},
		"TableDoc": tableDocJSON{}, "TablePage": tablePageJSON{},
	} {
		schema, ok := whole.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s missing", name)
			continue
		}
		var documented []string
		for p := range schema.Properties {
			documented = append(documented, p)
		}
		sort.Strings(documented)
		members, required := jsonMembers(reflect.TypeOf(v))
		if !reflect.DeepEqual(documented, members) {
			t.Errorf("schema %s: properties %v, want the JSON members %v", name, documented, members)
		}
		sort.Strings(schema.Required)
		if !reflect.DeepEqual(schema.Required, required) {
			t.Errorf("schema %s: required %v, want %v", name, schema.Required, required)
		}
	}
}

func prefixed(prefix string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = prefix + s
	}
	return out
}

// jsonMembers returns the JSON member names of struct type t, sorted, and
// those always present (not omitempty).
func jsonMembers(t reflect.Type) (members, required []string) {
	for i := 0; i < t.NumField(); i++ {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		members = append(members, name)
		if opts != "omitempty" {
			required = append(required, name)
		}
	}
	sort.Strings(members)
	sort.Strings(required)
	return members, required
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestStaticPages(t *testing.T) {
	h := New(Options{}).Handler()
	tests := []struct {
		target, ctype string
		contains      []string
	}{
		{"/", "text/html", []string{"keepstate dashboard", `src="dashboard/app.js"`, `href="dashboard/style.css"`, `id="tables-body"`, `id="query-form"`}},
		{"/dashboard/app.js", "text/javascript", []string{"api/stats", "movies?minAvg=", `getJSON("tables")`}},
		{"/dashboard/style.css", "text/css", []string{".counters"}},
		{"/swagger-ui/", "text/html", []string{"swagger-ui-bundle.js", "init.js"}},
		{"/swagger-ui/init.js", "text/javascript", []string{"../api-docs"}},
		{"/swagger-ui/swagger-ui-bundle.js", "text/javascript", []string{"SwaggerUIBundle"}},
		{"/swagger-ui/swagger-ui.css", "text/css", []string{".swagger-ui"}},
		{"/swagger-ui/LICENSE", "text/plain", []string{"Apache License"}},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			rec := get(t, h, tc.target)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200 (body %.200q)", rec.Code, rec.Body.String())
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.ctype) {
				t.Errorf("Content-Type = %q, want %s", ct, tc.ctype)
			}
			for _, s := range tc.contains {
				if !strings.Contains(rec.Body.String(), s) {
					t.Errorf("body does not contain %q", s)
				}
			}
			if strings.Contains(rec.Body.String(), "://cdn") || strings.Contains(rec.Body.String(), "unpkg.com") {
				t.Errorf("page refers to a CDN")
			}
		})
	}
	t.Run("dashboard CSP", func(t *testing.T) {
		if csp := get(t, h, "/").Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("Content-Security-Policy = %q", csp)
		}
	})
	t.Run("redirect", func(t *testing.T) {
		rec := get(t, h, "/swagger-ui")
		if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "swagger-ui/" {
			t.Errorf("status %d Location %q, want 301 to swagger-ui/", rec.Code, rec.Header().Get("Location"))
		}
	})
	t.Run("gzip", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodGet, "/swagger-ui/swagger-ui-bundle.js", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get("Content-Encoding") != "gzip" {
			t.Fatalf("Content-Encoding = %q, want gzip", rec.Header().Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(bytes.NewReader(rec.Body.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := assets.ReadFile("assets/swagger-ui/swagger-ui-bundle.js")
		if !bytes.Equal(plain, want) {
			t.Errorf("gunzipped body (%d bytes) differs from the asset (%d bytes)", len(plain), len(want))
		}
		t.Logf("swagger-ui-bundle.js: %d bytes, %d gzipped", len(want), rec.Body.Len())
	})
}

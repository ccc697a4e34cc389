package web

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// FuzzParseTableQuery feeds arbitrary query strings to the parser of GET
// /tables/{table} and arbitrary strings to the table cursor decoder: they
// never panic, every parser error is a 400 whose message is bounded, an
// accepted query is valid for the table and survives re-encoding (what
// routing sends to peers), and a decoded cursor encodes back to the same
// position.
func FuzzParseTableQuery(f *testing.F) {
	for _, s := range []string{
		"", "index=total", "index=total&min=8&max=9&limit=10&order=desc", "index=tier&eq=gold",
		"index=tier&min=a&max=b", "index=total&eq=1&min=2", "index=total&min=NaN", "index=total&max=1e400",
		"index=nope", "index=total&limit=0", "index=total&limit=1001", "index=total&after=%%%",
		"index=total&after=" + encodeTableCursor("customers", "total", engine.IndexNumber, engine.IndexCursor{Value: engine.Num(5), Key: []byte("k")}),
		"index=tier&after=" + encodeTableCursor("customers", "tier", engine.IndexString, engine.IndexCursor{Value: engine.Str("gold"), Key: []byte("k/1")}),
		"index=tier&max=%00", "index=tier&min=%FF", "index=total&order=sideways", "index=total&index=tier",
		"index=total;min=1", "index=total&min=-0&max=0",
	} {
		f.Add(s)
	}
	spec := customersSpec
	f.Fuzz(func(t *testing.T, raw string) {
		for _, kind := range []engine.IndexKind{engine.IndexNumber, engine.IndexString} {
			if c, err := decodeTableCursor("customers", "total", kind, raw); err == nil {
				again, err := decodeTableCursor("customers", "total", kind, encodeTableCursor("customers", "total", kind, c))
				if err != nil || !sameCursor(again, c) {
					t.Fatalf("cursor %+v does not survive re-encoding: %+v, %v", c, again, err)
				}
			}
		}
		q, pos, kind, err := parseTableQuery(spec, raw)
		if err != nil {
			var se *statusError
			if !errors.As(err, &se) || se.status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			if len(se.msg) > 250 {
				t.Fatalf("message of %d bytes for a %d-byte input: %q", len(se.msg), len(raw), se.msg)
			}
			return
		}
		vpos, vkind, err := q.Validate(spec)
		if err != nil || vpos != pos || vkind != kind {
			t.Fatalf("accepted query %+v is invalid: %v", q, err)
		}
		if q.Limit < 1 || q.Limit > MaxLimit || (q.HasMin && q.HasMax && valueLess(q.Max, q.Min, kind)) {
			t.Fatalf("accepted query out of range: %+v", q)
		}
		for _, b := range []struct {
			set bool
			v   engine.IndexValue
		}{{q.HasMin, q.Min}, {q.HasMax, q.Max}} {
			if b.set && (math.IsInf(b.v.Num, 0) || math.IsNaN(b.v.Num) || !validIndexString(b.v.Str)) {
				t.Fatalf("accepted bound %+v", b.v)
			}
		}
		enc := tableQueryValues(spec.Name, kind, q).Encode()
		again, pos2, kind2, err := parseTableQuery(spec, enc)
		if err != nil {
			t.Fatalf("re-encoded query %q refused: %v", enc, err)
		}
		if pos2 != pos || kind2 != kind || again.Index != q.Index || again.Limit != q.Limit || again.Desc != q.Desc ||
			again.HasMin != q.HasMin || again.HasMax != q.HasMax || !sameValue(again.Min, q.Min) || !sameValue(again.Max, q.Max) ||
			(again.After == nil) != (q.After == nil) || (q.After != nil && !sameCursor(*again.After, *q.After)) {
			t.Fatalf("re-encoding changed the query: %+v -> %+v", q, again)
		}
	})
}

// sameValue compares index values bit for bit (-0 is not 0).
func sameValue(a, b engine.IndexValue) bool {
	return math.Float64bits(a.Num) == math.Float64bits(b.Num) && a.Str == b.Str
}

func sameCursor(a, b engine.IndexCursor) bool {
	return sameValue(a.Value, b.Value) && bytes.Equal(a.Key, b.Key)
}

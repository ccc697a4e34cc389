package web

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// FuzzParseQuery feeds arbitrary query strings and ids to the parsers of
// GET /movies and GET /movies/{id}: they never panic, every error is a
// 400 whose message quotes a bounded part of the input, and an accepted
// query is a valid descending query of the movie table's avg index and
// survives re-encoding as the table query routing sends to peers.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{
		"", "minAvg=8", "minAvg=8&maxAvg=9&limit=10", "after=%%%garbage", "limit=0", "limit=1001",
		"minAvg=NaN", "minAvg=1e400", "min%zzAvg=1", "after=" + encodeCursor(indexCursorOf(mv(7, 1, 9))),
		"minAvg=1;maxAvg=2", "limit=1&limit=2", "maxAvg=-Inf",
	} {
		f.Add(s, "362")
	}
	f.Add("", "-9223372036854775808")
	f.Add("", "9223372036854775808")
	f.Add("", "0x10")
	f.Fuzz(func(t *testing.T, raw, id string) {
		checkErr := func(err error) {
			var se *statusError
			if !errors.As(err, &se) || se.status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			if len(se.msg) > 200 {
				t.Fatalf("message of %d bytes for a %d+%d-byte input: %q", len(se.msg), len(raw), len(id), se.msg)
			}
		}
		if _, err := parseMovieID(id); err != nil {
			checkErr(err)
		}
		q, err := parseRangeParams(raw)
		if err != nil {
			checkErr(err)
			return
		}
		if _, _, err := q.Validate(movies.Spec); err != nil {
			t.Fatalf("accepted query %+v is invalid: %v", q, err)
		}
		if q.Index != "avg" || !q.Desc || q.Limit < 1 || q.Limit > MaxLimit || (q.HasMin && q.HasMax && q.Min.Num > q.Max.Num) ||
			math.IsNaN(q.Min.Num) || math.IsNaN(q.Max.Num) || math.IsInf(q.Min.Num, 0) || math.IsInf(q.Max.Num, 0) {
			t.Fatalf("accepted query out of range: %+v", q)
		}
		sent := tableQueryValues(movies.Spec.Name, engine.IndexNumber, q).Encode()
		again, _, _, err := parseTableQuery(movies.Spec, sent)
		if err != nil {
			t.Fatalf("re-encoded query %q refused: %v", sent, err)
		}
		if !reflect.DeepEqual(again, q) {
			t.Fatalf("re-encoding changed the query: %+v -> %+v", q, again)
		}
	})
}

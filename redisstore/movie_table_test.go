package redisstore

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// movieTableSpec is the spec of the movie job's table, the one the movie
// layout migrates into.
var movieTableSpec = movies.Spec

// movieStream is the movie table's stream as the movie job configures it.
var movieStream = TableStream{Key: movies.StreamKey, MaxLen: DefaultStreamMaxLen, Fields: movies.StreamFields}

// movieKey is the table key of movie id: 8 bytes big-endian.
func movieKey(id int64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(id)) }

// movieDoc is movie id of partition p as the movie job's table stores it:
// a 16-byte value (count, then the sum's IEEE-754 bits, both big-endian)
// and the average as the one index value.
func movieDoc(id int64, p int32, count int64, sum float64, version int64) engine.Doc {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(count))
	v = binary.BigEndian.AppendUint64(v, math.Float64bits(sum))
	return engine.Doc{Key: movieKey(id), Partition: p, Version: version, Sources: map[int32]int64{0: version},
		Value: v, Index: []engine.IndexValue{engine.Num(sum / float64(count))}}
}

// TestMovieSpecMigrates checks that the movie job's spec is the one whose
// open migrates the movie layout, and that a spec differing in any part
// is not.
func TestMovieSpecMigrates(t *testing.T) {
	if !isMovieSpec(movies.Spec) {
		t.Fatalf("isMovieSpec(movies.Spec %+v) = false; opening the movie table would not migrate", movies.Spec)
	}
	str := movies.Spec
	str.Indexes = []engine.IndexSpec{{Name: "avg", Kind: engine.IndexString}}
	two := movies.Spec
	two.Indexes = append(append([]engine.IndexSpec(nil), movies.Spec.Indexes...), engine.IndexSpec{Name: "n", Kind: engine.IndexNumber})
	noTies, other := movies.Spec, movies.Spec
	noTies.TiesAscending = false
	other.Name = "movies2"
	for _, spec := range []engine.TableSpec{str, two, noTies, other} {
		if isMovieSpec(spec) {
			t.Errorf("isMovieSpec(%+v) = true, want false", spec)
		}
	}
}

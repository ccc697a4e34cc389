package web

import (
	"encoding/base64"
	"math"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

func TestCursorRoundTrip(t *testing.T) {
	tests := []cursor{ // as the movie API shows positions
		{Avg: 9, MovieID: 362},
		{Avg: 0, MovieID: 0},
		{Avg: math.Copysign(0, -1), MovieID: -1},
		{Avg: 25.0 / 3, MovieID: math.MaxInt64},
		{Avg: -math.MaxFloat64, MovieID: math.MinInt64},
		{Avg: math.SmallestNonzeroFloat64, MovieID: 1},
	}
	for _, c := range tests {
		s := encodeCursor(engine.IndexCursor{Value: engine.Num(c.Avg), Key: movies.Key(c.MovieID)})
		t.Run(s, func(t *testing.T) {
			got, err := decodeCursor(s)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if math.Float64bits(got.Value.Num) != math.Float64bits(c.Avg) || movieID(got.Key) != c.MovieID || len(got.Key) != 8 {
				t.Errorf("got %+v, want %+v", got, c)
			}
		})
	}
}

// TestCursorTamper flips every bit of a valid cursor's bytes and checks
// that no edited cursor is accepted.
func TestCursorTamper(t *testing.T) {
	valid := encodeCursor(indexCursorOf(mv(362, 2, 17)))
	raw, err := base64.RawURLEncoding.DecodeString(valid)
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		for bit := 0; bit < 8; bit++ {
			b := append([]byte(nil), raw...)
			b[i] ^= 1 << bit
			s := base64.RawURLEncoding.EncodeToString(b)
			if c, err := decodeCursor(s); err == nil {
				t.Errorf("byte %d bit %d flipped: accepted as %+v", i, bit, c)
			}
		}
	}
	for _, s := range []string{"", "A", valid[:len(valid)-2], valid + "AA", "!!!!" + valid[4:]} {
		if c, err := decodeCursor(s); err == nil {
			t.Errorf("decodeCursor(%q) accepted as %+v", s, c)
		}
	}
}

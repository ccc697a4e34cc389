package movies_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// fixedSerde decodes every rating as r, or fails with err.
type fixedSerde struct {
	r   avro.Rating
	err error
}

func (s fixedSerde) DecodeRating(context.Context, []byte) (avro.Rating, error) { return s.r, s.err }
func (fixedSerde) EncodeCountAndSum(context.Context, string, avro.CountAndSum) ([]byte, error) {
	return nil, nil
}
func (fixedSerde) DecodeCountAndSum(context.Context, []byte) (avro.CountAndSum, error) {
	return avro.CountAndSum{}, nil
}

func TestDecodeRating(t *testing.T) {
	tests := []struct {
		name      string
		serde     fixedSerde
		wantBad   bool
		wantRetry bool
	}{
		{"in range", fixedSerde{r: avro.Rating{MovieID: 1, Rating: 7.5}}, false, false},
		{"zero", fixedSerde{r: avro.Rating{MovieID: 1, Rating: 0}}, false, false},
		{"above ten", fixedSerde{r: avro.Rating{MovieID: 1, Rating: 10.5}}, true, false},
		{"negative", fixedSerde{r: avro.Rating{MovieID: 1, Rating: -1}}, true, false},
		{"NaN", fixedSerde{r: avro.Rating{MovieID: 1, Rating: math.NaN()}}, true, false},
		{"registry down", fixedSerde{err: avro.ErrRegistryUnavailable}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := movies.Job(tt.serde).Decode(context.Background(), nil)
			if got := errors.Is(err, movies.ErrBadRating); got != tt.wantBad {
				t.Errorf("errors.Is(%v, ErrBadRating) = %v, want %v", err, got, tt.wantBad)
			}
			if got := errors.Is(err, engine.ErrRetry); got != tt.wantRetry {
				t.Errorf("errors.Is(%v, engine.ErrRetry) = %v, want %v", err, got, tt.wantRetry)
			}
		})
	}
}

func TestValuesRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, a := range []movies.Agg{{Count: 1, Sum: 7}, {Count: 1 << 40, Sum: 1e15 + 0.5}, {}} {
		b, err := movies.Values{}.Encode(ctx, "", a)
		if err != nil || len(b) != 16 {
			t.Fatalf("Encode(%+v) = %d bytes, %v; want 16 bytes", a, len(b), err)
		}
		got, err := movies.Values{}.Decode(ctx, "", b)
		if err != nil || got != a {
			t.Errorf("Decode(Encode(%+v)) = %+v, %v", a, got, err)
		}
	}
	if _, err := (movies.Values{}).Decode(ctx, "", make([]byte, 15)); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("Decode of 15 bytes: got %v, want ErrInvalid", err)
	}
}

func TestJobSpec(t *testing.T) {
	r, err := movies.Job(fixedSerde{}).Runner()
	if err != nil {
		t.Fatal(err)
	}
	got, want := r.Spec(), movies.Spec
	if got.Name != want.Name || !got.TiesAscending || len(got.Indexes) != 1 || got.Indexes[0] != want.Indexes[0] {
		t.Errorf("Spec = %+v, want %+v", got, want)
	}
}

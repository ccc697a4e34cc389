package main

import (
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestRatingsSeen checks that the average of a probe key's first n ratings
// tells n back, for every n the scenario can reach.
func TestRatingsSeen(t *testing.T) {
	var sum float64
	for n := int64(1); n <= 100000; n++ {
		sum += probeRating(n)
		if got := ratingsSeen(sum / float64(n)); got != n {
			t.Fatalf("ratingsSeen after %d ratings (average %v) = %d, want %d", n, sum/float64(n), got, n)
		}
	}
}

// TestProbeKeys checks that the probe keys lie above the catalog and that
// key i belongs to partition i.
func TestProbeKeys(t *testing.T) {
	const catalog, partitions = 5000, 12
	keys := probeKeys(catalog, partitions)
	if len(keys) != partitions {
		t.Fatalf("got %d probe keys, want %d", len(keys), partitions)
	}
	for i, k := range keys {
		if k <= catalog {
			t.Errorf("probe key %d is in the catalog (1..%d)", k, catalog)
		}
		if p := engine.PartitionFor(engine.Int64Keys.Append(nil, k), partitions); p != int32(i) {
			t.Errorf("probe key %d is in partition %d, want %d", k, p, i)
		}
	}
}

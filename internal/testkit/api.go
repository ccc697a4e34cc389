package testkit

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Movie is the JSON of GET /movies/{id}.
type Movie struct {
	MovieID int64   `json:"movieId"`
	Rating  float64 `json:"rating"`
	Count   int64   `json:"count"`
}

// APIStats is the JSON of GET /api/stats, with the counters decoded into S:
// engine.Stats (which testkit cannot import: engine's tests import testkit).
type APIStats[S any] struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
	Stats  S      `json:"stats"`
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// GetJSON fetches url and decodes a 200 answer into v; it returns the
// status code, and an error for transport or decode failures.
func GetJSON(url string, v any) (int, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || v == nil {
		return resp.StatusCode, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return resp.StatusCode, fmt.Errorf("decode %s: %w (%q)", url, err, b)
	}
	return resp.StatusCode, nil
}

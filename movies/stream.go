package movies

import (
	"context"
	"strconv"

	"github.com/keepstate/keepstate/engine"
)

// StreamKey is the Redis stream (under the store's prefix) that receives
// every new average of the movie table when the Redis store runs it.
const StreamKey = "rating-averages-stream"

// StreamFields returns the fields of a movie's stream entry: "movieId",
// "avg" and "count", as decimal strings (the average in the shortest form
// that parses back to the same float64). A document that is not a movie's
// gives no fields. It neither keeps nor modifies d.
func StreamFields(d engine.Doc) []any {
	id, err := engine.Int64Keys.Decode(d.Key)
	if err != nil {
		return nil
	}
	a, err := Values{}.Decode(context.Background(), "", d.Value)
	if err != nil {
		return nil
	}
	return []any{"movieId", strconv.FormatInt(id, 10), "avg", strconv.FormatFloat(a.Avg(), 'g', -1, 64), "count", strconv.FormatInt(a.Count, 10)}
}

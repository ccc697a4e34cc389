package engine

import "errors"

// Sentinel errors returned by stores and the engine. Check them with errors.Is.
var (
	// ErrNotFound means the requested key has no document in the table.
	ErrNotFound = errors.New("not found")
	// ErrFenced means a write was refused because another owner has claimed
	// the partition (a newer epoch) or already wrote a newer version of a
	// document. The writer must drop its cached state for the partition.
	ErrFenced = errors.New("fenced: partition owned by another writer")
	// ErrInvalid means a document or query is malformed (for example a
	// non-finite index value, a key of the wrong size, or a negative
	// limit). Nothing was written.
	ErrInvalid = errors.New("invalid")
	// ErrUnavailable means the store cannot be reached right now; the caller
	// may retry later. Stores wrap their transport errors with it.
	ErrUnavailable = errors.New("store unavailable")
	// ErrCorrupt means the store's data failed an integrity check (a
	// damaged disk or a bad copy): nothing it holds can be trusted, and a
	// retry reads the same damage. The engine does not restart its group
	// session on it: Run stops and returns the error, and whoever runs the
	// engine rebuilds the store from the changelog (see docstore) or stops.
	ErrCorrupt = errors.New("store corrupt")
)

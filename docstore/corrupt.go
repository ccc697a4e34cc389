package docstore

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
)

// ErrCorrupt means a file of the store failed its checksum (a damaged disk
// or a bad copy): what the store holds can no longer be trusted. The error
// names the directory. Recovery is to stop the instance, move the
// directory away and start again: the state is rebuilt from the
// changelog, as for a lost store. Check with errors.Is.
var ErrCorrupt = errors.New("store corrupt")

// corrupt wraps err in ErrCorrupt, with the store's directory and how to
// recover, when it reports on-disk corruption; other errors (nil
// included) are returned as they are.
func (s *Store) corrupt(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) || !pebble.IsCorruptionError(err) {
		return err
	}
	return fmt.Errorf("docstore %s: %w: a file failed its checksum; stop the instance, move the directory away and start again to rebuild the state from the changelog: %w",
		s.dir, ErrCorrupt, err)
}

// corruptionListener reports on-disk corruption Pebble finds as an error
// log line. Pebble's default calls its logger's Fatalf, which would stop
// the process from whatever goroutine read the damaged block (the write
// cache's warm-up, a compaction): the read fails with a corruption error
// instead, which the store returns as ErrCorrupt.
func corruptionListener(log *slog.Logger) *pebble.EventListener {
	return &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
		log.Error("docstore: on-disk corruption: a file failed its checksum; move the data directory away and start again to rebuild the state from the changelog",
			"path", info.Path, "details", info.Details)
	}}
}

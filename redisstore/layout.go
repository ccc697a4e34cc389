package redisstore

import (
	"context"
	"fmt"

	"github.com/keepstate/keepstate/engine"
)

// NeedsPartitions reports whether the store keeps a partition's keys
// together (on a Redis Cluster, one hash tag per partition): then
// OpenTable needs the table's engine.TableSpec.Partitions.
func (s *Store) NeedsPartitions() bool { return s.keys.cluster }

// RemoveOldLayout deletes, on a cluster, the keys that the layout keeping
// a whole table under one hash tag ("{<prefix>t:<table>}:...") left for
// the table called name, and reports whether there were any. OpenTable
// refuses a table while they exist. On a single server or a Sentinel
// master it does nothing.
func (s *Store) RemoveOldLayout(ctx context.Context, name string) (bool, error) {
	if !s.keys.cluster {
		return false, nil
	}
	old := s.keys.clusterTableSpec(name)
	pattern := keys{prefix: old[:len(old)-len("spec")]}.pattern()
	removed := 0
	err := s.scanKeys(ctx, pattern, scanChunk, func(page []string) error {
		// Every key of the old layout has the table's one hash tag.
		n, err := s.client.Unlink(ctx, page...).Result()
		removed += int(n)
		return err
	})
	if err != nil {
		return false, wrap("table "+name+": remove the old cluster layout", err)
	}
	if removed > 0 {
		s.log.Info("old cluster layout removed", "table", name, "keys", removed)
	}
	return removed > 0, nil
}

// checkLayout refuses, on a cluster, a table whose partition count is
// unknown (its keys could not be found) and one written by the layout
// that kept a whole table under one hash tag.
func (t *table) checkLayout(ctx context.Context) error {
	if !t.keys.cluster {
		return nil
	}
	if t.spec.Partitions <= 0 {
		return fmt.Errorf("redisstore: table %s: on a Redis Cluster a table needs its partition count (TableSpec.Partitions) to find a document's hash slot: %w",
			t.spec.Name, engine.ErrInvalid)
	}
	old := t.s.keys.clusterTableSpec(t.spec.Name)
	n, err := t.s.client.Exists(ctx, old).Result()
	if err != nil {
		return wrap("open table "+t.spec.Name, err)
	}
	if n > 0 {
		return fmt.Errorf("redisstore: table %s is in the earlier cluster layout, one hash slot per table (%s exists); stop every instance and run `keepstate reset` to wipe it, and the next start restores it from the changelog: %w",
			t.spec.Name, old, ErrOldLayout)
	}
	return nil
}

// home is the partition whose keys hold the document of key: on a
// cluster PartitionFor(key, Partitions); on a single server documents are
// not kept by partition, and home is 0.
func (t *table) home(key []byte) int32 {
	if !t.keys.cluster {
		return 0
	}
	return engine.PartitionFor(key, t.spec.Partitions)
}

// partitions is what a query reads: the table's one set of indexes on a
// single server, every partition's on a cluster.
func (t *table) partitions() int32 {
	if !t.keys.cluster {
		return 1
	}
	return t.spec.Partitions
}

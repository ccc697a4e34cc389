package docstore

import "github.com/keepstate/keepstate/engine"

var _ engine.InstanceLocal = (*Store)(nil)

// InstanceLocal reports true: the store lives in this instance's data
// directory, so the engine may drop copies of partitions that moved to
// another instance (engine.Config.StaleDropAfter).
func (s *Store) InstanceLocal() bool { return true }

var _ engine.InstanceLocal = (*table)(nil)

// InstanceLocal reports true for a table too: its documents are those of
// the partitions this instance owns (or owned), so the engine answers only
// partitions RUNNING here and routes the others to their owner.
func (t *table) InstanceLocal() bool { return true }

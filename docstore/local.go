package docstore

import "github.com/keepstate/keepstate/engine"

var _ engine.InstanceLocal = (*Store)(nil)

// InstanceLocal reports true: the store lives in this instance's data
// directory, so the engine may drop copies of partitions that moved to
// another instance (engine.Config.StaleDropAfter).
func (s *Store) InstanceLocal() bool { return true }

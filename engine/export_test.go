package engine

// RestoreYield exports restoreYield, how long the standbys wait for the
// instance's restores before a turn, to the engine_test package.
const RestoreYield = restoreYield

// Rejoin makes the engine's member rejoin its group, as a caught-up
// warm-up does.
func (e *Engine) Rejoin(reason string) { e.rejoin(reason) }

// MayBeOpen exports mayBeOpen: which of the transactions of aggregate
// partitions parts and input partitions inputs may be open.
func (e *Engine) MayBeOpen(parts, inputs []int32) ([]int32, []int32) {
	return e.mayBeOpen(parts, inputs)
}

// DepartedFences is how many transactions the member, as the group's
// leader, initialised because their partition's owner had departed.
func (e *Engine) DepartedFences() int64 { return e.c.departedFences.Load() }

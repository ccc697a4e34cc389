package engine

// RestoreYield exports restoreYield, how long the standbys wait for the
// instance's restores before a turn, to the engine_test package.
const RestoreYield = restoreYield

// Rejoin makes the engine's member rejoin its group, as a caught-up
// warm-up does.
func (e *Engine) Rejoin(reason string) { e.rejoin(reason) }

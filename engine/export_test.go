package engine

// RestoreYield exports restoreYield, how long the standbys wait for the
// instance's restores before a turn, to the engine_test package.
const RestoreYield = restoreYield

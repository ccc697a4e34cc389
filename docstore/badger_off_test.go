//go:build !badger

package docstore

// badgerCandidates is empty without -tags badger: the ordinary test build
// does not compile Badger (see badger_test.go).
var badgerCandidates []engineCandidate

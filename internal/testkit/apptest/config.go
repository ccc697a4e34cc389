// Package apptest holds the test helpers that need package app, apart
// from testkit, which the in-package tests of app's dependencies (engine,
// docstore, redisstore, web) import: testkit importing app would close an
// import cycle. Only tests (app's own too, as app_test) import it.
package apptest

import (
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// Names are the prefixes of a test config's names; each gets the test's
// name and a random suffix (testkit.UniqueName), so that tests sharing a
// broker share no topic or consumer group.
type Names struct {
	App, Input, Output string // application id, input and output topic
}

// Config returns base (app.Default, or an example's defaults) set up for
// one test: brokers; an application id and topics unique to the test; a
// fresh data dir; an ephemeral loopback API port; a 100ms commit interval;
// 3 partitions; no fsync; and peerSecret for routing between the test's
// instances. Other fields stay as in base.
func Config(t testing.TB, base app.Config, brokers []string, names Names, peerSecret string) app.Config {
	t.Helper()
	c := base
	c.Brokers = brokers
	c.ApplicationID = testkit.UniqueName(t, names.App)
	c.InputTopic = testkit.UniqueName(t, names.Input)
	c.OutputTopic = testkit.UniqueName(t, names.Output)
	c.DataDir = t.TempDir()
	c.HTTPAddr = "127.0.0.1:0"
	c.CommitInterval = 100 * time.Millisecond
	c.Partitions = 3
	c.Fsync = false
	// In-process instances share one Go runtime, whose memory limit each
	// one's governor would set for all. Child processes run the default.
	c.MemoryLimitMiB = -1
	c.PeerSecret = peerSecret
	return c
}

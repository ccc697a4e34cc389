package app_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2EDuplicateInstanceIDStops: a second live instance with the same
// --instance-id fences the first, which stops with a clear error instead of
// fighting over the partitions.
func TestE2EDuplicateInstanceIDStops(t *testing.T) {
	cc := newChildCluster(t)
	first, second := cc.newInstance("first", true), cc.newInstance("second", true)
	second.instanceID = first.instanceID
	cc.start(first)
	cc.waitReady(first, 60*time.Second)
	cc.start(second)
	testkit.Eventually(t, 60*time.Second, "one of the two stops", func() error {
		for _, in := range []*crashInstance{first, second} {
			if in.proc.Exited() {
				if !strings.Contains(in.proc.Output(), "same --instance-id") {
					t.Errorf("%s stopped without naming the duplicate id: %s", in.name, in.proc.Output())
				}
				if in.proc.Err() == nil {
					t.Errorf("%s exited with code 0", in.name)
				}
				return nil
			}
		}
		return fmt.Errorf("both still running")
	})
}

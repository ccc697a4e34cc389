package app_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/app"
)

func TestValidateRedisMode(t *testing.T) {
	tests := []struct {
		mode string
		ok   bool
	}{{"single", true}, {"cluster", true}, {"sentinel", true}, {"", true}, {"ring", false}}
	for _, tc := range tests {
		c := app.Default()
		c.Store, c.RedisMode = app.StoreRedis, tc.mode
		err := c.Validate()
		if tc.ok && err != nil {
			t.Errorf("mode %q: Validate() = %v, want nil", tc.mode, err)
		}
		if !tc.ok && (!errors.Is(err, app.ErrConfig) || !strings.Contains(err.Error(), "redis-mode")) {
			t.Errorf("mode %q: Validate() = %v, want an ErrConfig naming redis-mode", tc.mode, err)
		}
	}
}

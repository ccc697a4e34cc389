package engine

import (
	"context"
	"errors"
	"time"
)

// retryUnavailable calls fn until it returns something other than an error
// wrapping ErrUnavailable, backing off from 100 ms to 5 s, and marks the
// store unavailable for /readyz meanwhile. It returns ctx's error if ctx
// ends first.
func (e *Engine) retryUnavailable(ctx context.Context, what string, fn func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || !errors.Is(err, ErrUnavailable) {
			e.route.parts.setStoreErr(nil)
			return err
		}
		e.route.parts.setStoreErr(err)
		e.log.Warn("store unavailable, retrying", "op", what, "err", err, "retry_in", backoff)
		if !sleepCtx(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

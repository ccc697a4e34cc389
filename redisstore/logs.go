package redisstore

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// RouteClientLogs sends the go-redis client's own log lines (for example
// "failed to dial after 5 attempts" while Redis is down) to l at level Warn
// with component=go-redis; a nil l discards them. Without it go-redis prints
// them to stderr with the standard log package. go-redis has one
// process-wide logger, so this affects every client of the process: call it
// once, from main, before Open. Safe for concurrent use.
func RouteClientLogs(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	redis.SetLogger(clientLog{l: l})
}

type clientLog struct{ l *slog.Logger }

func (c clientLog) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	c.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

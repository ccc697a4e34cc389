package app

import (
	"cmp"
	"io"
	"log/slog"
)

// NewLogger returns a text logger writing to w at the configured level.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	l, err := ParseLogLevel(level)
	if err != nil {
		return nil, err
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// discardLogger is l, or a logger that discards for nil.
func discardLogger(l *slog.Logger) *slog.Logger { return cmp.Or(l, slog.New(slog.DiscardHandler)) }

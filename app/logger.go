package app

import (
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

func discardLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return l
}

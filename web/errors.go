package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// RetryAfterSeconds is the Retry-After value sent with 503 answers.
const RetryAfterSeconds = "1"

// errorBody is the JSON body of every error response.
type errorBody struct {
	Error string `json:"error"`
}

// statusError is an error with its HTTP status and client-facing message.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// badRequest returns a 400 error; the message must name the parameter.
func badRequest(format string, args ...any) error {
	return &statusError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// notFound returns a 404 error.
func notFound(format string, args ...any) error {
	return &statusError{status: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

// errPanic marks an error recovered from a panic in a handler.
var errPanic = errors.New("handler panic")

// statusOf maps err to the HTTP status, client-facing message and whether to retry.
func statusOf(err error, c echo.Context) (status int, msg string, retry bool) {
	var se *statusError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &se):
		return se.status, se.msg, false
	case errors.As(err, &he):
		switch he.Code {
		case http.StatusNotFound:
			return he.Code, fmt.Sprintf("no route for %s %s", c.Request().Method, c.Request().URL.Path), false
		case http.StatusMethodNotAllowed:
			return he.Code, fmt.Sprintf("method %s not allowed on %s", c.Request().Method, c.Request().URL.Path), false
		}
		if m, ok := he.Message.(string); ok && he.Code < 500 {
			return he.Code, m, false
		}
		return he.Code, http.StatusText(he.Code), false
	case errors.Is(err, engine.ErrLeaseLapsed):
		return http.StatusServiceUnavailable, "this instance cannot confirm it still owns the partition (its group membership is unconfirmed: it was paused or cut off from Kafka) and the group names no other owner yet; retry later", true
	case errors.Is(err, engine.ErrUnavailable):
		return http.StatusServiceUnavailable, "store unavailable, retry later", true
	case errors.Is(err, engine.ErrCorrupt):
		// It is rebuilt from the changelog (or another instance takes over).
		return http.StatusServiceUnavailable, "store corrupt: it is being rebuilt from the changelog, retry later", true
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "store query timed out, retry later", true
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "request canceled", true
	case errors.Is(err, engine.ErrInvalid):
		return http.StatusBadRequest, err.Error(), false
	}
	return http.StatusInternalServerError, "internal server error", false
}

// handleError is echo's HTTPErrorHandler: it writes every error as a JSON
// body {"error": "..."} and logs server-side failures.
func (s *Server) handleError(err error, c echo.Context) {
	status, msg, retry := statusOf(err, c)
	req := c.Request()
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable:
		s.log.Error("http request failed", "method", req.Method, "path", req.URL.Path, "status", status, "err", err)
	case status == http.StatusServiceUnavailable:
		s.log.Warn("http request unavailable", "method", req.Method, "path", req.URL.Path, "err", err)
	default:
		s.log.Debug("http request rejected", "method", req.Method, "path", req.URL.Path, "status", status, "err", err)
	}
	if c.Response().Committed {
		return
	}
	if retry {
		c.Response().Header().Set("Retry-After", RetryAfterSeconds)
	}
	if req.Method == http.MethodHead {
		err = c.NoContent(status)
	} else {
		err = c.JSON(status, errorBody{Error: msg})
	}
	if err != nil {
		s.log.Warn("write error response", "err", err)
	}
}

// recoverPanic turns a panic in a handler into a 500 answer and a logged
// error with the stack, instead of a dropped connection.
func (s *Server) recoverPanic(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if r == http.ErrAbortHandler {
				panic(r)
			}
			stack := make([]byte, 8<<10)
			stack = stack[:runtime.Stack(stack, false)]
			s.log.Error("http handler panic", "path", c.Request().URL.Path, "panic", fmt.Sprint(r), "stack", string(stack))
			err = fmt.Errorf("%w: %v", errPanic, r)
		}()
		return next(c)
	}
}

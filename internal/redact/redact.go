// Package redact removes credentials from URLs before they reach a log
// line, an error message, a record header or an API answer.
package redact

import (
	"net/url"
	"strings"
)

// Marker replaces the userinfo (user and password) of a URL.
const Marker = "REDACTED"

// URL returns raw with any userinfo replaced by Marker
// ("http://key:secret@host/x" → "http://REDACTED@host/x"). It never
// fails: a string that does not parse as a URL has everything between
// "://" and the last "@" of its authority replaced the same way. The user
// name goes too, because API keys are often passed as the user.
func URL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = url.User(Marker)
		return u.String()
	}
	scheme, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest = raw[:i+3], raw[i+3:]
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return raw
	}
	return scheme + Marker + rest[at:]
}

// Userinfo splits the credentials off raw: it returns the URL without
// userinfo, and the user name and password it held (empty when none).
// A string that does not parse is returned redacted, without credentials.
func Userinfo(raw string) (clean, user, password string) {
	u, err := url.Parse(raw)
	if err != nil {
		return URL(raw), "", ""
	}
	if u.User == nil {
		return raw, "", ""
	}
	user = u.User.Username()
	password, _ = u.User.Password()
	u.User = nil
	return u.String(), user, password
}

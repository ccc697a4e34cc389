package redisstore

import "strings"

// keys builds the key names of one store: every key starts with its
// prefix (see the package doc; tables in table_keys.go, the movie layout
// the migration reads in migrate_legacy.go). On a cluster each partition
// of a table has a hash tag of its own, so that its keys share a slot.
type keys struct {
	prefix  string
	cluster bool
}

// pattern is a SCAN MATCH pattern for every key of the store.
func (k keys) pattern() string {
	var b strings.Builder
	for _, r := range k.prefix {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('*')
	return b.String()
}

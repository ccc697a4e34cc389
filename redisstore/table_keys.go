package redisstore

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"strconv"
	"strings"

	"github.com/keepstate/keepstate/engine"
)

// keys builds the key names of one store, all under its prefix (see the
// package doc); on a cluster each partition of a table has a hash tag.
type keys struct {
	prefix  string
	cluster bool
}

// globEscaper escapes the SCAN MATCH pattern characters.
var globEscaper = strings.NewReplacer("*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`, `\`, `\\`)

// pattern is a SCAN MATCH pattern for every key of the store.
func (k keys) pattern() string { return globEscaper.Replace(k.prefix) + "*" }

// tableKeys builds the key names of one table (doc.go). Table and index
// names hold no ':' nor SCAN pattern character. The partition p passed to
// a builder names the partition's own keys, and on a cluster chooses the
// hash tag of every key.
type tableKeys struct {
	root    string // "<prefix>t:<table>:", on a cluster "{<prefix>t:<table>:"
	cluster bool
}

// tablesNamespace is what every table key starts with after the store's
// prefix; no key of the movie layout starts with it.
const tablesNamespace = "t:"

func (k keys) table(name string) tableKeys {
	if k.cluster {
		return tableKeys{root: "{" + k.prefix + tablesNamespace + name + ":", cluster: true}
	}
	return tableKeys{root: k.prefix + tablesNamespace + name + ":"}
}

// clusterTableSpec is the spec key of a table in the layout that kept a
// whole table under one hash tag on a cluster.
func (k keys) clusterTableSpec(name string) string {
	return "{" + k.prefix + tablesNamespace + name + "}:spec"
}

// base is where the keys of partition p start: the root on a single
// server, the partition's hash tag on a cluster.
func (k tableKeys) base(p int32) string {
	if k.cluster {
		return k.root + formatInt(int64(p)) + "}:"
	}
	return k.root
}

// where names, for errors, the hash slot of partition p's keys on a
// cluster (by their hash tag, which CLUSTER KEYSLOT turns into the slot);
// nothing on a single server.
func (k tableKeys) where(p int32) string {
	if !k.cluster {
		return ""
	}
	return " (hash slot of " + strings.TrimSuffix(k.base(p), ":") + ")"
}

// stream is the key of the table's change stream named key: under the
// prefix, or on a cluster one per partition p under its hash tag (it is
// written in the same MULTI/EXEC as the partition).
func (k tableKeys) stream(prefix string, p int32, key string) string {
	if k.cluster {
		return k.base(p) + "stream:" + key
	}
	return prefix + key
}

// spec is the key of the table's spec (on a cluster one per partition,
// where a claim checks it in its slot).
func (k tableKeys) spec(p int32) string { return k.base(p) + "spec" }

// migrated marks a table that the movie layout was migrated into (or
// found absent); migrating is the lock of the instance migrating it.
// Neither exists on a cluster.
func (k tableKeys) migrated() string  { return k.root + "migrated" }
func (k tableKeys) migrating() string { return k.root + "migrating" }

// docPrefix is followed by the hex of a document key of partition p.
func (k tableKeys) docPrefix(p int32) string       { return k.base(p) + "d:" }
func (k tableKeys) doc(p int32, key []byte) string { return k.docPrefix(p) + hex.EncodeToString(key) }

// index is the sorted set of the index called name (on a cluster one per
// partition).
func (k tableKeys) index(p int32, name string) string { return k.base(p) + "i:" + name }

func (k tableKeys) partition(p int32, what string) string {
	if k.cluster {
		return k.base(p) + what
	}
	return k.root + "p:" + formatInt(int64(p)) + ":" + what
}

func (k tableKeys) members(p int32) string    { return k.partition(p, "members") }
func (k tableKeys) checkpoint(p int32) string { return k.partition(p, "checkpoint") }
func (k tableKeys) epoch(p int32) string      { return k.partition(p, "epoch") }
func (k tableKeys) batch(p int32) string      { return k.partition(p, "batch") }

// kept reports whether key is one that Reset keeps: a partition's epoch
// or a spec (and, on a single server, the migration marker).
func (k tableKeys) kept(key string) bool {
	if !strings.HasPrefix(key, k.root) {
		return false
	}
	if k.cluster {
		return strings.HasSuffix(key, "}:epoch") || strings.HasSuffix(key, "}:spec")
	}
	return key == k.spec(0) || key == k.migrated() ||
		(strings.HasPrefix(key, k.root+"p:") && strings.HasSuffix(key, ":epoch"))
}

// pattern is a SCAN MATCH pattern for every key of the table.
func (k tableKeys) pattern() string { return keys{prefix: k.root}.pattern() }

// numberPrefix is the 8-byte member prefix of a number index value: the
// float's bits made order-preserving (sign bit flipped for positive
// numbers, every bit for negative ones), big-endian, -0 folded into +0.
func numberPrefix(v float64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), orderedBits(v))
}

func orderedBits(v float64) uint64 {
	if v == 0 {
		v = 0 // folds -0 into +0
	}
	bits := math.Float64bits(v)
	if bits>>63 == 1 {
		return ^bits
	}
	return bits | 1<<63
}

// decodeNumberPrefix inverts numberPrefix (-0 comes back as +0).
func decodeNumberPrefix(b []byte) (float64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	u := binary.BigEndian.Uint64(b)
	if u>>63 == 1 {
		u &^= 1 << 63
	} else {
		u = ^u
	}
	return math.Float64frombits(u), true
}

// storedIndex is the hash field value of an index: the member's value
// part without the string separator (which the scripts add).
func storedIndex(v engine.IndexValue, kind engine.IndexKind) string {
	if kind == engine.IndexNumber {
		return string(numberPrefix(v.Num))
	}
	return v.Str
}

// indexMember is the index member of key for a storedIndex value: a
// number's 8 bytes, or a string and 0x00, then the key; so the byte order
// of members (ZRANGE BYLEX) is (value, key) ascending.
func indexMember(stored string, kind engine.IndexKind, key string) string {
	if kind == engine.IndexNumber {
		return stored + key
	}
	return stored + "\x00" + key
}

// Bounds of a ZRANGE BYLEX range are strings: "[" (inclusive) or "("
// (exclusive) then the member bytes; "" is no bound ("-" or "+").

// tighter returns the more restrictive of two lower bounds (upper=false)
// or two upper bounds (upper=true).
func tighter(a, b string, upper bool) string {
	if a == "" || b == "" {
		return a + b // the one that is set, if any
	}
	c := strings.Compare(a[1:], b[1:])
	if upper {
		c = -c
	}
	if c > 0 || c == 0 && a[0] == '(' {
		return a
	}
	return b
}

// cutNUL returns s up to its first 0x00 byte and whether it had one.
// Stored strings never contain 0x00, so a bound or cursor value
// s+"\x00"+rest selects the same documents as one just above s.
func cutNUL(s string) (string, bool) {
	s, _, cut := strings.Cut(s, "\x00")
	return s, cut
}

// lowerBound is the bound where values >= v begin.
func lowerBound(v engine.IndexValue, kind engine.IndexKind) string {
	if kind == engine.IndexNumber {
		return "[" + string(numberPrefix(v.Num))
	}
	if s, cut := cutNUL(v.Str); cut {
		return "[" + s + "\x01" // values > s
	}
	return "[" + v.Str + "\x00"
}

// upperBound is the exclusive bound where values <= v end.
func upperBound(v engine.IndexValue, kind engine.IndexKind) string {
	if kind == engine.IndexNumber {
		// Finite or infinite v never has every ordered bit set, so +1
		// does not overflow; it is the first member prefix above v.
		return "(" + string(binary.BigEndian.AppendUint64(nil, orderedBits(v.Num)+1))
	}
	s, _ := cutNUL(v.Str) // values <= s+"\x00"+rest are values <= s
	return "(" + s + "\x01"
}

// afterBound is the bound of the members strictly after cursor c: a lower
// bound for an ascending query, an upper one for a descending query.
func afterBound(c engine.IndexCursor, kind engine.IndexKind) string {
	if s, cut := cutNUL(c.Value.Str); kind == engine.IndexString && cut {
		// No stored value equals c's: after it are the values > s (or,
		// descending, <= s). No member equals s+"\x01", so inclusiveness
		// does not matter.
		return "(" + s + "\x01"
	}
	return "(" + indexMember(storedIndex(c.Value, kind), kind, string(c.Key))
}

// formatInt formats v in base 10.
func formatInt(v int64) string { return strconv.FormatInt(v, 10) }

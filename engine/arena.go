package engine

import (
	"strconv"

	"github.com/IBM/sarama"
)

// recordArena hands out the producer records of one batch (a drained input
// batch, a flush) from a few large allocations instead of several small
// ones per record (see docs/benchmarks.md): the messages, their headers,
// and the bytes of their keys and header values. Nothing handed out is
// written again until reset, so a record stays valid while sarama holds
// it. An arena belongs to one goroutine.
type recordArena struct {
	msgs []sarama.ProducerMessage
	hdrs []sarama.RecordHeader
	encs []sarama.ByteEncoder
	buf  []byte
}

// arenaBytes is the size of a new byte block.
const arenaBytes = 16 << 10

// newRecordArena returns an arena sized for n records of headers headers
// each; it grows past that when needed.
func newRecordArena(n, headers int) *recordArena {
	return &recordArena{msgs: make([]sarama.ProducerMessage, 0, n),
		hdrs: make([]sarama.RecordHeader, 0, n*headers), encs: make([]sarama.ByteEncoder, 0, 2*n)}
}

// enc returns b as a sarama.Encoder without allocating: a ByteEncoder
// stored to an interface is boxed on the heap, a pointer into the arena is
// not (*ByteEncoder has ByteEncoder's methods).
func (a *recordArena) enc(b []byte) sarama.Encoder {
	if len(a.encs) == cap(a.encs) {
		a.encs = make([]sarama.ByteEncoder, 0, max(128, 2*cap(a.encs)))
	}
	a.encs = append(a.encs, b)
	return &a.encs[len(a.encs)-1]
}

// msg returns a new zeroed record.
func (a *recordArena) msg() *sarama.ProducerMessage {
	if len(a.msgs) == cap(a.msgs) {
		a.msgs = make([]sarama.ProducerMessage, 0, max(64, 2*cap(a.msgs)))
	}
	a.msgs = a.msgs[:len(a.msgs)+1]
	return &a.msgs[len(a.msgs)-1]
}

// headers returns n zeroed headers; appending to them reallocates rather
// than overwrite a neighbour's.
func (a *recordArena) headers(n int) []sarama.RecordHeader {
	if cap(a.hdrs)-len(a.hdrs) < n {
		a.hdrs = make([]sarama.RecordHeader, 0, max(64*n, 2*cap(a.hdrs)))
	}
	start := len(a.hdrs)
	a.hdrs = a.hdrs[:start+n]
	return a.hdrs[start : start+n : start+n]
}

// reset lets the arena hand out its memory again, zeroed: its current
// blocks are kept, earlier ones are left to the collector. Call it only
// once nothing handed out is referenced any more (sarama has returned
// every record of the send).
func (a *recordArena) reset() {
	clear(a.msgs)
	clear(a.hdrs)
	clear(a.encs)
	a.msgs, a.hdrs, a.encs, a.buf = a.msgs[:0], a.hdrs[:0], a.encs[:0], a.buf[:0]
}

// reserve makes room for n more bytes in the current block.
func (a *recordArena) reserve(n int) {
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, max(arenaBytes, n))
	}
}

// cut returns the bytes appended since start, capacity-limited.
func (a *recordArena) cut(start int) []byte { return a.buf[start:len(a.buf):len(a.buf)] }

// int returns the decimal text of v.
func (a *recordArena) int(v int64) []byte {
	a.reserve(20)
	start := len(a.buf)
	a.buf = strconv.AppendInt(a.buf, v, 10)
	return a.cut(start)
}

// sources returns appendSources(nil, m) (see headers.go).
func (a *recordArena) sources(m map[int32]int64) []byte {
	a.reserve(len(m) * 32)
	start := len(a.buf)
	a.buf = appendSources(a.buf, m)
	return a.cut(start)
}

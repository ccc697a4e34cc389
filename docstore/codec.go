package docstore

import (
	"encoding/binary"

	"github.com/keepstate/keepstate/internal/moviedoc"
)

// Names of the shared movie document (internal/moviedoc) this package
// uses often.
const (
	collection = moviedoc.Collection
	fieldRank  = moviedoc.FieldRank
	signBit    = moviedoc.SignBit
)

// memberKey returns the members key of movie: the namespace, the
// partition, then the movie id, so that one partition's movies are one key
// range.
func memberKey(p int32, movie int64) []byte {
	k := binary.BigEndian.AppendUint32(append(make([]byte, 0, 13), nsMembers), uint32(p))
	return binary.BigEndian.AppendUint64(k, uint64(movie)^signBit)
}

// memberMovie returns the movie id of a members key.
func memberMovie(k []byte) int64 {
	return int64(binary.BigEndian.Uint64(k[5:13]) ^ signBit)
}

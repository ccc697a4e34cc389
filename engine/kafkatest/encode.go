package kafkatest

import (
	"encoding/binary"
	"maps"
	"slices"
)

// encodeMetadata encodes a consumer protocol subscription (version 0:
// topics and user data), as sarama.GroupMemberDescription.GetMemberMetadata
// decodes it.
func encodeMetadata(topics []string, userData []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(topics)))
	for _, t := range topics {
		b = appendString(b, t)
	}
	return appendBytes(b, userData)
}

// encodeAssignment encodes a consumer protocol assignment (version 0:
// topics with partitions, no user data), as
// sarama.GroupMemberDescription.GetMemberAssignment decodes it.
func encodeAssignment(assign map[string][]int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(assign)))
	for _, t := range slices.Sorted(maps.Keys(assign)) {
		b = appendString(b, t)
		b = binary.BigEndian.AppendUint32(b, uint32(len(assign[t])))
		for _, p := range assign[t] {
			b = binary.BigEndian.AppendUint32(b, uint32(p))
		}
	}
	return appendBytes(b, nil)
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// appendBytes appends Kafka BYTES: an int32 length (-1 for nil) and the data.
func appendBytes(b, v []byte) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

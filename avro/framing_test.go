package avro

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

func TestFrameUnframeRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		id      int
		payload []byte
		want    []byte
	}{
		{"id 1", 1, []byte{0xd4, 0x05}, []byte{0, 0, 0, 0, 1, 0xd4, 0x05}},
		{"big id", 0x01020304, []byte{7}, []byte{0, 1, 2, 3, 4, 7}},
		{"max int32", math.MaxInt32, nil, []byte{0, 0x7f, 0xff, 0xff, 0xff}},
		{"negative", -2, []byte{1}, []byte{0, 0xff, 0xff, 0xff, 0xfe, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Frame(tt.id, tt.payload)
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("Frame(%d, %x) = %x, want %x", tt.id, tt.payload, got, tt.want)
			}
			id, payload, err := Unframe(got)
			if err != nil || id != tt.id || !bytes.Equal(payload, tt.payload) {
				t.Errorf("Unframe(%x) = %d, %x, %v; want %d, %x, nil", got, id, payload, err, tt.id, tt.payload)
			}
		})
	}
}

func TestFrameCopiesPayload(t *testing.T) {
	p := []byte{1, 2, 3}
	f := Frame(9, p)
	p[0] = 99
	if f[5] != 1 {
		t.Errorf("Frame aliases its payload: got byte %d after the caller changed it, want 1", f[5])
	}
}

func TestUnframeNotFramed(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"four bytes", []byte{0, 0, 0, 1}},
		{"magic 1", []byte{1, 0, 0, 0, 1, 2}},
		{"text", []byte("hello world")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Unframe(tt.in)
			if !errors.Is(err, ErrNotFramed) {
				t.Errorf("Unframe(%x) error = %v, want ErrNotFramed", tt.in, err)
			}
		})
	}
}

package docstore

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// encodeWithMsgpack is the reference form of a stored table document:
// the same fields written with vmihailenco/msgpack's Encoder, as the store
// wrote them before tableEncoder appended the bytes itself.
func encodeWithMsgpack(spec engine.TableSpec, doc engine.Doc) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	errs := []error{
		enc.EncodeMapLen(7),
		enc.EncodeString(tfID), enc.EncodeString(docID(doc.Key)),
		enc.EncodeString(tfKey), enc.EncodeBytes(doc.Key),
		enc.EncodeString(tfPartition), enc.EncodeInt64(int64(doc.Partition)),
		enc.EncodeString(tfVersion), enc.EncodeInt64(doc.Version),
		enc.EncodeString(tfValue), enc.EncodeBytes(doc.Value),
		enc.EncodeString(tfSources),
	}
	if doc.Sources == nil {
		errs = append(errs, enc.EncodeNil())
	} else {
		parts := slices.Sorted(func(yield func(int32) bool) {
			for p := range doc.Sources {
				if !yield(p) {
					return
				}
			}
		})
		errs = append(errs, enc.EncodeMapLen(len(parts)))
		for _, p := range parts {
			errs = append(errs, enc.EncodeString(strconv.FormatInt(int64(p), 10)), enc.EncodeInt64(doc.Sources[p]))
		}
	}
	errs = append(errs, enc.EncodeString(tfIndex))
	if doc.Index == nil {
		errs = append(errs, enc.EncodeNil())
	} else {
		errs = append(errs, enc.EncodeMapLen(len(spec.Indexes)))
		for i, ix := range spec.Indexes {
			errs = append(errs, enc.EncodeString(ix.Name))
			if ix.Kind == engine.IndexNumber {
				errs = append(errs, enc.EncodeFloat64(doc.Index[i].Num))
			} else {
				errs = append(errs, enc.EncodeString(doc.Index[i].Str))
			}
		}
	}
	return buf.Bytes(), errors.Join(errs...)
}

// TestTableEncoderMatchesMsgpack checks that tableEncoder writes, byte for
// byte, what msgpack's Encoder writes for the same document, across the
// sizes where msgpack's headers change (fixstr, str8, str16, bin8, bin16,
// bin32, fixmap, map16), and that decodeTableDoc reads it back.
func TestTableEncoderMatchesMsgpack(t *testing.T) {
	many := map[int32]int64{}
	for p := range int32(20) {
		many[p*1000003] = int64(p) << 40
	}
	for _, tc := range []struct {
		name string
		spec engine.TableSpec
		doc  engine.Doc
	}{
		{"order", ordersSpec, orderDoc(7, 3, 9)},
		{"movie", movies.Spec, movieTableDoc(12345, 2, 77, 10, 73.5)},
		{"nil value, sources and index", engine.TableSpec{Name: "plain"}, engine.Doc{Key: []byte{0}, Version: -1}},
		{"empty value, sources and index", engine.TableSpec{Name: "plain"},
			engine.Doc{Key: []byte("k"), Value: []byte{}, Sources: map[int32]int64{}, Index: []engine.IndexValue{}}},
		{"long key (str16 _id, bin8 key)", ordersSpec, withDoc(orderDoc(1, 0, 1), func(d *engine.Doc) { d.Key = bytes.Repeat([]byte{0xff}, 200) })},
		{"longest key", ordersSpec, withDoc(orderDoc(1, 0, 1), func(d *engine.Doc) { d.Key = bytes.Repeat([]byte{1}, engine.MaxKeyBytes) })},
		{"value of bin16", ordersSpec, withDoc(orderDoc(2, 0, 1), func(d *engine.Doc) { d.Value = make([]byte, 300) })},
		{"value of bin32", ordersSpec, withDoc(orderDoc(2, 0, 1), func(d *engine.Doc) { d.Value = make([]byte, 70000) })},
		{"sources of 16 entries and more", ordersSpec, withDoc(orderDoc(3, 1, 1), func(d *engine.Doc) { d.Sources = many })},
		{"negative numbers", ordersSpec, withDoc(orderDoc(4, 0, 1), func(d *engine.Doc) {
			d.Version, d.Sources = -5, map[int32]int64{2147483647: -1}
		})},
		{"string index values of every header", engine.TableSpec{Name: "strs", Indexes: []engine.IndexSpec{
			{Name: "a", Kind: engine.IndexString}, {Name: "b", Kind: engine.IndexString}, {Name: "c", Kind: engine.IndexString}}},
			engine.Doc{Key: []byte("s"), Index: []engine.IndexValue{engine.Str(""), engine.Str(strings.Repeat("x", 40)), engine.Str(strings.Repeat("é", 256))}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := encodeWithMsgpack(tc.spec, tc.doc)
			if err != nil {
				t.Fatal(err)
			}
			got := newTableEncoder().encode(tc.spec, tc.doc)
			if !bytes.Equal(got, want) {
				t.Fatalf("encode =\n%x\nwant (msgpack's Encoder)\n%x", got, want)
			}
			back, err := decodeTableDoc(got, tc.spec, false)
			if err != nil || !sameTableDoc(back, tc.doc) {
				t.Fatalf("decode = %+v, %v; want %+v", back, err, tc.doc)
			}
		})
	}
}

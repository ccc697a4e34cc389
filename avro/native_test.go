package avro

import (
	"errors"
	"fmt"
	"testing"

	"github.com/linkedin/goavro/v2"
)

const pageViewSchema = `{"type":"record","name":"PageView","fields":[
	{"name":"page","type":"string"},{"name":"ms","type":"long"},{"name":"tag","type":["null","string"],"default":null}]}`

type pageView struct {
	Page string
	MS   int64
}

func convertPageView(f map[string]any) (pageView, error) {
	page, ok1 := f["page"].(string)
	ms, ok2 := f["ms"].(int64)
	if !ok1 || !ok2 {
		return pageView{}, fmt.Errorf("page view fields: got %v", f)
	}
	return pageView{Page: page, MS: ms}, nil
}

func TestDecoder(t *testing.T) {
	f := startFake(t)
	id := f.seed(t, "views-value", pageViewSchema)
	r := newTestRegistry(t, f.URL())
	codec, err := goavro.NewCodec(pageViewSchema)
	if err != nil {
		t.Fatal(err)
	}
	record := func(native map[string]any) []byte {
		b, err := codec.BinaryFromNative(nil, native)
		if err != nil {
			t.Fatal(err)
		}
		return Frame(id, b)
	}
	good := record(map[string]any{"page": "/home", "ms": int64(42), "tag": goavro.Union("string", "x")})
	dec := Decoder(r, convertPageView)

	tests := []struct {
		name    string
		in      []byte
		want    pageView
		wantErr error
	}{
		{"record", good, pageView{Page: "/home", MS: 42}, nil},
		{"not framed", []byte("plain"), pageView{}, ErrNotFramed},
		{"unknown schema id", Frame(id+100, []byte{2, 'a', 4}), pageView{}, ErrUnknownSchema},
		{"truncated", good[:len(good)-2], pageView{}, ErrDecode},
		{"trailing bytes", append(append([]byte{}, good...), 0), pageView{}, ErrDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := dec(testCtx(t), tt.in)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err: got %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("convert refuses", func(t *testing.T) {
		refuse := Decoder(r, func(map[string]any) (pageView, error) { return pageView{}, errors.New("no") })
		if _, err := refuse(testCtx(t), good); !errors.Is(err, ErrDecode) {
			t.Errorf("got %v, want ErrDecode", err)
		}
	})
}

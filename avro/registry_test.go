package avro

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

func TestNewRegistryRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8081", "ftp://x", "http://", "::"} {
		if _, err := NewRegistry(u); err == nil {
			t.Errorf("NewRegistry(%q) error = nil, want an error", u)
		}
	}
}

func TestPing(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	if err := newTestRegistry(t, fake.URL()).Ping(ctx); err != nil {
		t.Errorf("Ping(up) = %v, want nil", err)
	}
	fake.Close()
	err := newTestRegistry(t, fake.URL()).Ping(ctx)
	if !errors.Is(err, ErrRegistryUnavailable) {
		t.Fatalf("Ping(closed) = %v, want ErrRegistryUnavailable", err)
	}
	if !strings.Contains(err.Error(), fake.URL()) {
		t.Errorf("Ping(closed) = %q, want the message to name %s", err, fake.URL())
	}
}

func TestRegisterIsIdempotent(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	r := newTestRegistry(t, fake.URL())
	id1, err := r.Register(ctx, "ratings-value", RatingSchema)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	before := fake.requests.Load()
	id2, err := r.Register(ctx, "ratings-value", RatingSchema)
	if err != nil || id2 != id1 {
		t.Fatalf("second Register = %d, %v; want %d, nil", id2, err, id1)
	}
	if n := fake.requests.Load() - before; n != 0 {
		t.Errorf("second Register sent %d requests, want 0 (cached)", n)
	}
	// Another client (another process) gets the same id and no new version.
	id3, err := newTestRegistry(t, fake.URL()).Register(ctx, "ratings-value", RatingSchema)
	if err != nil || id3 != id1 {
		t.Errorf("Register from a new client = %d, %v; want %d, nil", id3, err, id1)
	}
	if _, ok := fake.GetSchema("ratings-value", 2); ok {
		t.Errorf("registering the same schema again created version 2")
	}
	// A different schema under another subject gets another id.
	id4, err := r.Register(ctx, "changelog-value", CountAndSumSchema)
	if err != nil || id4 == id1 {
		t.Errorf("Register(CountAndSum) = %d, %v; want an id other than %d", id4, err, id1)
	}
}

func TestDecodeTouchesNetworkOncePerID(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	b, err := newTestRegistry(t, fake.URL()).EncodeRating(ctx, "ratings-value", Rating{MovieID: 1, Rating: 2})
	if err != nil {
		t.Fatalf("EncodeRating: %v", err)
	}
	r := newTestRegistry(t, fake.URL())
	before := fake.requests.Load()
	for i := 0; i < 100; i++ {
		if _, err := r.DecodeRating(ctx, b); err != nil {
			t.Fatalf("DecodeRating #%d: %v", i, err)
		}
	}
	if n := fake.requests.Load() - before; n != 1 {
		t.Errorf("100 decodes sent %d requests, want 1", n)
	}
	// Cached schemas keep working when the registry goes away.
	fake.Close()
	if _, err := r.DecodeRating(ctx, b); err != nil {
		t.Errorf("DecodeRating with the registry down and the id cached: %v", err)
	}
}

func TestUnknownSchemaIsCached(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	b := Frame(42, []byte{0xd4, 0x05, 0, 0, 0, 0, 0, 0, 0x24, 0x40})

	r := newTestRegistry(t, fake.URL(), WithUnknownTTL(time.Hour))
	before := fake.requests.Load()
	for i := 0; i < 5; i++ {
		if _, err := r.DecodeRating(ctx, b); !errors.Is(err, ErrUnknownSchema) {
			t.Fatalf("DecodeRating(unknown id) = %v, want ErrUnknownSchema", err)
		}
	}
	if n := fake.requests.Load() - before; n != 1 {
		t.Errorf("5 decodes of an unknown id sent %d requests, want 1", n)
	}

	// With a short TTL, an id that appears later is found.
	r = newTestRegistry(t, fake.URL(), WithUnknownTTL(time.Millisecond))
	if _, err := r.DecodeRating(ctx, b); !errors.Is(err, ErrUnknownSchema) {
		t.Fatalf("DecodeRating(unknown id) = %v, want ErrUnknownSchema", err)
	}
	fake.SeedSchema("late-value", 1, 42, sr.Schema{Schema: RatingSchema, Type: sr.TypeAvro})
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := r.DecodeRating(ctx, b)
		if err == nil {
			if got != (Rating{MovieID: 362, Rating: 10}) {
				t.Errorf("DecodeRating = %+v, want {362 10}", got)
			}
			break
		}
		if !errors.Is(err, ErrUnknownSchema) || time.Now().After(deadline) {
			t.Fatalf("DecodeRating after seeding id 42 = %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRegistryDown(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	b := Frame(1, []byte{0xd4, 0x05, 0, 0, 0, 0, 0, 0, 0x24, 0x40})
	fake.Close()
	r := newTestRegistry(t, fake.URL())
	if _, err := r.DecodeRating(ctx, b); !errors.Is(err, ErrRegistryUnavailable) {
		t.Errorf("DecodeRating(registry down) = %v, want ErrRegistryUnavailable", err)
	}
	if _, err := r.EncodeRating(ctx, "ratings-value", Rating{}); !errors.Is(err, ErrRegistryUnavailable) {
		t.Errorf("EncodeRating(registry down) = %v, want ErrRegistryUnavailable", err)
	}
	if _, err := r.DecodeCountAndSum(ctx, b); !errors.Is(err, ErrRegistryUnavailable) {
		t.Errorf("DecodeCountAndSum(registry down) = %v, want ErrRegistryUnavailable", err)
	}
}

// TestRegistryErrorAnswers checks how HTTP answers other than success map to
// sentinels: only a registry's own "not found" is permanent.
func TestRegistryErrorAnswers(t *testing.T) {
	registryError := func(status, code int) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(sr.ResponseError{ErrorCode: code, Message: "from test"})
		}
	}
	plain := func(status int) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) { http.Error(w, "plain text", status) }
	}
	tests := []struct {
		name          string
		answer        func(http.ResponseWriter)
		decode, encod error
	}{
		{"500 registry error", registryError(500, 50001), ErrRegistryUnavailable, ErrRegistryUnavailable},
		{"503 plain", plain(503), ErrRegistryUnavailable, ErrRegistryUnavailable},
		{"429", plain(429), ErrRegistryUnavailable, ErrRegistryUnavailable},
		{"401", registryError(401, 40101), ErrRegistryUnavailable, ErrRegistryUnavailable},
		{"404 not a registry", plain(404), ErrRegistryUnavailable, ErrRegistryUnavailable},
		{"404 schema not found", registryError(404, 40403), ErrUnknownSchema, ErrUnknownSchema},
		{"409 incompatible", registryError(409, 409), ErrRegistryUnavailable, ErrSchemaRejected},
		{"422 invalid", registryError(422, 42201), ErrRegistryUnavailable, ErrSchemaRejected},
		{"200 not json", func(w http.ResponseWriter) { _, _ = w.Write([]byte("<html>")) }, ErrRegistryUnavailable, ErrRegistryUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := startFake(t)
			fake.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
				tt.answer(w)
				return true
			})
			ctx := testCtx(t)
			r := newTestRegistry(t, fake.URL())
			_, err := r.DecodeRating(ctx, Frame(1, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0}))
			if !errors.Is(err, tt.decode) {
				t.Errorf("DecodeRating = %v, want %v", err, tt.decode)
			}
			_, err = r.EncodeRating(ctx, "ratings-value", Rating{})
			if !errors.Is(err, tt.encod) {
				t.Errorf("EncodeRating = %v, want %v", err, tt.encod)
			}
			if err := r.Ping(ctx); !errors.Is(err, ErrRegistryUnavailable) {
				t.Errorf("Ping = %v, want ErrRegistryUnavailable", err)
			}
		})
	}
}

// hangingFake is a registry whose answers wait until released.
func hangingFake(t *testing.T) (*fakeRegistry, func()) {
	fake := startFake(t)
	release := make(chan struct{})
	var once sync.Once
	fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return false
	})
	stop := func() { once.Do(func() { close(release) }) }
	t.Cleanup(stop) // runs before fake.Close (cleanups are LIFO)
	return fake, stop
}

func TestContextCancellation(t *testing.T) {
	fake, _ := hangingFake(t)
	r := newTestRegistry(t, fake.URL())
	b := Frame(1, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0})

	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.DecodeRating(done, b); !errors.Is(err, context.Canceled) {
		t.Errorf("DecodeRating(cancelled ctx) = %v, want context.Canceled", err)
	}

	ctx, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	start := time.Now()
	_, err := r.DecodeRating(ctx, b)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("DecodeRating(hanging registry, 100ms ctx) = %v, want context.DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("DecodeRating returned after %v, want about 100ms", el)
	}
	if _, err := r.Register(ctx, "s-value", RatingSchema); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Register(expired ctx) = %v, want context.DeadlineExceeded", err)
	}
}

func TestRequestTimeout(t *testing.T) {
	fake, _ := hangingFake(t)
	r, err := NewRegistry(fake.URL(), WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.DecodeRating(testCtx(t), Frame(1, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0}))
	if !errors.Is(err, ErrRegistryUnavailable) {
		t.Errorf("DecodeRating(registry slower than the timeout) = %v, want ErrRegistryUnavailable", err)
	}
}

func TestConcurrentDecoders(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	enc := newTestRegistry(t, fake.URL())
	ratings := make([][]byte, 0, 20)
	for i := 0; i < 20; i++ {
		b, err := enc.EncodeRating(ctx, "ratings-value", Rating{MovieID: int64(i), Rating: float64(i) / 2})
		if err != nil {
			t.Fatalf("EncodeRating: %v", err)
		}
		ratings = append(ratings, b)
	}
	sums, err := enc.EncodeCountAndSum(ctx, "changelog-value", CountAndSum{Count: 3, Sum: 4.5})
	if err != nil {
		t.Fatalf("EncodeCountAndSum: %v", err)
	}
	unknown := Frame(777, ratings[0][5:])

	dec := newTestRegistry(t, fake.URL())
	before := fake.requests.Load()
	const workers = 8
	errs := make(chan error, workers*3)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				b := ratings[(i+w)%len(ratings)]
				got, err := dec.DecodeRating(ctx, b)
				want := int64((i + w) % len(ratings))
				if err != nil || got.MovieID != want || got.Rating != float64(want)/2 {
					errs <- errors.New("rating decoded wrong: " + err2s(err))
					return
				}
				if cs, err := dec.DecodeCountAndSum(ctx, sums); err != nil || cs != (CountAndSum{3, 4.5}) {
					errs <- errors.New("count and sum decoded wrong: " + err2s(err))
					return
				}
				if _, err := dec.DecodeRating(ctx, unknown); !errors.Is(err, ErrUnknownSchema) {
					errs <- errors.New("unknown id: " + err2s(err))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Three distinct ids (rating, count-and-sum, unknown): one request each.
	if n := fake.requests.Load() - before; n != 3 {
		t.Errorf("concurrent decoders sent %d requests, want 3", n)
	}
}

func err2s(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

package testkit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/riferrei/srclient"

	"github.com/keepstate/keepstate/internal/testkit"
)

const ratingSchema = `{"namespace":"io.confluent.demo","type":"record","name":"Rating",` +
	`"fields":[{"name":"movie_id","type":"long"},{"name":"rating","type":"double"}]}`

// TestStartRegistry registers and reads back a schema with srclient, the
// client keepstate's avro package uses, and checks the registry is gone
// after the test's cleanup.
func TestStartRegistry(t *testing.T) {
	var url string
	t.Run("serve", func(t *testing.T) {
		reg := testkit.StartRegistry(t)
		url = reg.URL()
		if !strings.HasPrefix(url, "http://127.0.0.1:") {
			t.Errorf("URL: got %q, want http://127.0.0.1:PORT", url)
		}
		c := srclient.NewSchemaRegistryClient(url)
		created, err := c.CreateSchema("ratings-value", ratingSchema, srclient.Avro)
		if err != nil {
			t.Fatalf("CreateSchema: %v", err)
		}
		again, err := c.CreateSchema("ratings-value", ratingSchema, srclient.Avro)
		if err != nil {
			t.Fatalf("CreateSchema again: %v", err)
		}
		if again.ID() != created.ID() {
			t.Errorf("same schema registered twice: got ids %d and %d, want equal", created.ID(), again.ID())
		}
		c.CachingEnabled(false)
		got, err := c.GetSchema(created.ID())
		if err != nil {
			t.Fatalf("GetSchema(%d): %v", created.ID(), err)
		}
		if got.Codec() == nil {
			t.Fatalf("GetSchema(%d): no Avro codec", created.ID())
		}
		if name := got.Codec().CanonicalSchema(); !strings.Contains(name, "io.confluent.demo.Rating") {
			t.Errorf("schema %d: got %s, want the Rating record", created.ID(), name)
		}
		if !reg.Fake().SubjectExists("ratings-value") {
			t.Errorf("Fake().SubjectExists(ratings-value): got false, want true")
		}
		if _, err := c.GetSchema(created.ID() + 1000); err == nil {
			t.Errorf("GetSchema of an unknown id: got nil error, want not found")
		}
	})
	if resp, err := http.Get(url + "/subjects"); err == nil {
		resp.Body.Close()
		t.Errorf("registry still answers after cleanup: %s", resp.Status)
	}
}

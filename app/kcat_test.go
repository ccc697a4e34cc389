package app_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// kcatRecord is a key/value pair printed by kcat with -f '%K,%S,%k%s'.
type kcatRecord struct{ key, value []byte }

// parseKcat splits kcat output in the '%K,%S,%k%s' format (key length,
// value length, raw key, raw value; -1 for null).
func parseKcat(out []byte) ([]kcatRecord, error) {
	var recs []kcatRecord
	for len(out) > 0 {
		var lens [2]int
		for i := range lens {
			j := bytes.IndexByte(out, ',')
			if j < 0 {
				return nil, errorf("bad kcat output near %q", out)
			}
			n, err := strconv.Atoi(string(out[:j]))
			if err != nil {
				return nil, errorf("bad length %q", out[:j])
			}
			lens[i] = max(n, 0)
			out = out[j+1:]
		}
		if len(out) < lens[0]+lens[1] {
			return nil, errorf("kcat output truncated")
		}
		recs = append(recs, kcatRecord{key: out[:lens[0]], value: out[lens[0] : lens[0]+lens[1]]})
		out = out[lens[0]+lens[1]:]
	}
	return recs, nil
}

// TestE2EKcatInterop checks keepstate against librdkafka's kcat: kcat reads
// the averages and decodes them as Java's Long/Double serializers wrote
// them, and a Confluent-framed rating written by kcat is aggregated.
func TestE2EKcatInterop(t *testing.T) {
	kcat := testkit.LookPath(t, "kcat", "apt-get install kafkacat")
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	in := startInstance(t, c)

	t.Run("kcat produces a Confluent-framed rating", func(t *testing.T) {
		client, err := avro.NewRegistry(reg.URL())
		if err != nil {
			t.Fatal(err)
		}
		v, err := client.EncodeRating(context.Background(), avro.ValueSubject(c.InputTopic), avro.Rating{MovieID: 4242, Rating: 7.5})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "rating.bin")
		if err := os.WriteFile(file, v, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(kcat, "-P", "-b", strings.Join(brokers, ","), "-t", c.InputTopic, "-p", "1", file)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat -P: %v\n%s", err, out)
		}
		waitMovie(t, in.api, movie{MovieID: 4242, Rating: 7.5, Count: 1}, 30*time.Second)
	})

	t.Run("kcat consumes rating-averages", func(t *testing.T) {
		produceJSON(t, c, `{"movie_id":362,"rating":10}`, `{"movie_id":362,"rating":8}`)
		waitMovie(t, in.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)
		testkit.Eventually(t, 20*time.Second, "kcat sees 362 -> 9.0", func() error {
			cmd := exec.Command(kcat, "-C", "-b", strings.Join(brokers, ","), "-t", c.OutputTopic,
				"-o", "beginning", "-e", "-q", "-f", "%K,%S,%k%s")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return errorf("kcat -C: %v: %s", err, stderr.String())
			}
			recs, err := parseKcat(out)
			if err != nil {
				return err
			}
			last := map[int64]float64{}
			for _, r := range recs {
				id, err := engine.Int64Keys.Decode(r.key)
				if err != nil {
					return err
				}
				if last[id], err = engine.DecodeDouble(r.value); err != nil {
					return err
				}
			}
			if last[362] != 9.0 {
				return errorf("kcat read %d records, 362 -> %v, want 9.0", len(recs), last[362])
			}
			return nil
		})
	})
}

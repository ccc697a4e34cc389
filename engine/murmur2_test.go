package engine

// testdata/murmur2_java_vectors.json was computed by the Java Kafka client
// itself (kafka-clients 3.9.1; 4.1.1 gives byte-identical output), so this
// test needs no Java. To regenerate:
//
//	mvn -q dependency:get -Dartifact=org.apache.kafka:kafka-clients:3.9.1 -Dtransitive=false
//	mvn -q dependency:get -Dartifact=org.slf4j:slf4j-api:1.7.36 -Dtransitive=false
//	java -cp ~/.m2/repository/org/apache/kafka/kafka-clients/3.9.1/kafka-clients-3.9.1.jar:\
//	  ~/.m2/repository/org/slf4j/slf4j-api/1.7.36/slf4j-api-1.7.36.jar \
//	  Gen.java 3.9.1 > engine/testdata/murmur2_java_vectors.json
//
// with this Gen.java (single-file source launch, Java 11+):
//
//	import java.nio.charset.StandardCharsets;
//	import java.util.*;
//	import org.apache.kafka.common.serialization.LongSerializer;
//	import org.apache.kafka.common.utils.Utils;
//	import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
//
//	public class Gen {
//	  static final int[] NS = {1, 3, 6, 12};
//	  static StringBuilder out = new StringBuilder();
//	  static boolean first = true;
//	  static String hex(byte[] b) { StringBuilder s = new StringBuilder(); for (byte x : b) s.append(String.format("%02x", x)); return s.toString(); }
//	  static void emit(String kind, String value, byte[] key) {
//	    out.append(first ? "\n" : ",\n"); first = false;
//	    out.append("    {\"kind\": \"").append(kind).append("\", \"value\": \"").append(value)
//	       .append("\", \"key_hex\": \"").append(hex(key)).append("\", \"murmur2\": ").append(Utils.murmur2(key))
//	       .append(", \"partitions\": {");
//	    for (int i = 0; i < NS.length; i++) {
//	      if (i > 0) out.append(", ");
//	      out.append("\"").append(NS[i]).append("\": ").append(BuiltInPartitioner.partitionForKey(key, NS[i]));
//	    }
//	    out.append("}}");
//	  }
//	  public static void main(String[] a) {
//	    String[] strs = {"", "a", "ab", "abc", "abcd", "abcde", "hello", "kafka", "movie-362", "The quick brown fox jumps over the lazy dog"};
//	    for (String s : strs) emit("string", s, s.getBytes(StandardCharsets.UTF_8));
//	    LongSerializer ls = new LongSerializer();
//	    List<Long> longs = new ArrayList<>(Arrays.asList(0L, 1L, 2L, 362L, 128L, 255L, 256L, 294L, 1000000L, -1L, -362L, Long.MAX_VALUE, Long.MIN_VALUE, Integer.MAX_VALUE + 1L));
//	    Random r = new Random(20261130L);
//	    for (int i = 0; i < 16; i++) longs.add(r.nextLong());
//	    for (int i = 0; i < 16; i++) longs.add((long) r.nextInt(100000));
//	    for (long v : longs) emit("long", Long.toString(v), ls.serialize("t", v));
//	    byte[] raw = new byte[37]; r.nextBytes(raw); emit("bytes", "random 37 bytes", raw);
//	    System.out.print("{\n  \"generator\": \"org.apache.kafka:kafka-clients:" + a[0] + " Utils.murmur2 and BuiltInPartitioner.partitionForKey\",\n  \"vectors\": [" + out + "\n  ]\n}\n");
//	  }
//	}

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strconv"
	"testing"

	"github.com/IBM/sarama"
)

type javaVector struct {
	Kind       string           `json:"kind"`
	Value      string           `json:"value"`
	KeyHex     string           `json:"key_hex"`
	Murmur2    int32            `json:"murmur2"`
	Partitions map[string]int32 `json:"partitions"`
}

func loadJavaVectors(t *testing.T) []javaVector {
	t.Helper()
	raw, err := os.ReadFile("testdata/murmur2_java_vectors.json")
	if err != nil {
		t.Fatalf("read vectors: %v", err)
	}
	var file struct {
		Vectors []javaVector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("parse vectors: %v", err)
	}
	if len(file.Vectors) < 40 {
		t.Fatalf("got %d vectors, want at least 40", len(file.Vectors))
	}
	return file.Vectors
}

func (v javaVector) key(t *testing.T) []byte {
	t.Helper()
	k, err := hex.DecodeString(v.KeyHex)
	if err != nil {
		t.Fatalf("bad key_hex %q: %v", v.KeyHex, err)
	}
	return k
}

func partitionCount(t *testing.T, s string) int32 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		t.Fatalf("bad partition count %q: %v", s, err)
	}
	return int32(n)
}

func TestMurmur2MatchesJava(t *testing.T) {
	negatives := 0
	for _, v := range loadJavaVectors(t) {
		t.Run(v.Kind+"/"+v.Value, func(t *testing.T) {
			key := v.key(t)
			if got := Murmur2(key); got != v.Murmur2 {
				t.Errorf("Murmur2(%x) = %d, want %d", key, got, v.Murmur2)
			}
			for ns, want := range v.Partitions {
				n := partitionCount(t, ns)
				if got := PartitionFor(key, n); got != want {
					t.Errorf("PartitionFor(%x, %d) = %d, want %d", key, n, got, want)
				}
			}
		})
		if v.Murmur2 < 0 {
			negatives++
		}
	}
	if negatives == 0 {
		t.Errorf("vectors hold no negative hash; toPositive is untested")
	}
}

func TestMovieKeyMatchesJavaLongSerializer(t *testing.T) {
	for _, v := range loadJavaVectors(t) {
		if v.Kind != "long" {
			continue
		}
		t.Run(v.Value, func(t *testing.T) {
			id, err := strconv.ParseInt(v.Value, 10, 64)
			if err != nil {
				t.Fatalf("bad long %q: %v", v.Value, err)
			}
			if got := hex.EncodeToString(int64Key(id)); got != v.KeyHex {
				t.Errorf("int64Key(%d) = %s, want %s", id, got, v.KeyHex)
			}
			back, err := Int64Keys.Decode(v.key(t))
			if err != nil || back != id {
				t.Errorf("Int64Keys.Decode(%s) = %d, %v; want %d, nil", v.KeyHex, back, err, id)
			}
		})
	}
}

func TestDecodeMovieKeyWrongLength(t *testing.T) {
	for _, n := range []int{0, 1, 4, 7, 9, 16} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			_, err := Int64Keys.Decode(make([]byte, n))
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Int64Keys.Decode(%d bytes) error = %v, want ErrInvalid", n, err)
			}
		})
	}
}

func TestPartitionForNonPositiveCount(t *testing.T) {
	for _, n := range []int32{0, -1, math.MinInt32} {
		if got := PartitionFor([]byte("k"), n); got != -1 {
			t.Errorf("PartitionFor(k, %d) = %d, want -1", n, got)
		}
	}
}

func TestJavaPartitionerMatchesJava(t *testing.T) {
	p := NewJavaPartitioner("ratings-by-movie-repartition")
	if !p.RequiresConsistency() {
		t.Errorf("RequiresConsistency() = false, want true")
	}
	for _, v := range loadJavaVectors(t) {
		key := v.key(t)
		for ns, want := range v.Partitions {
			n := partitionCount(t, ns)
			// Call twice: the hasher must be reset between messages.
			for i := 0; i < 2; i++ {
				got, err := p.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, n)
				if err != nil || got != want {
					t.Errorf("Partition(%s %q, %d) = %d, %v; want %d, nil", v.Kind, v.Value, n, got, err, want)
				}
			}
		}
	}
}

func TestJavaPartitionerAgreesWithPartitionFor(t *testing.T) {
	p := NewJavaPartitioner("t")
	for id := int64(-500); id < 2000; id += 7 {
		key := int64Key(id * 104729)
		for _, n := range []int32{1, 2, 5, 7, 12, 64} {
			got, err := p.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, n)
			if want := PartitionFor(key, n); err != nil || got != want {
				t.Fatalf("Partition(%x, %d) = %d, %v; want %d", key, n, got, err, want)
			}
		}
	}
}

func TestJavaPartitionerWithoutKey(t *testing.T) {
	p := NewJavaPartitioner("t")
	dc, ok := p.(sarama.DynamicConsistencyPartitioner)
	if !ok {
		t.Fatalf("partitioner %T does not implement DynamicConsistencyPartitioner", p)
	}
	msg := &sarama.ProducerMessage{Value: sarama.StringEncoder("v")}
	if dc.MessageRequiresConsistency(msg) {
		t.Errorf("MessageRequiresConsistency(no key) = true, want false")
	}
	seen := map[int32]bool{}
	for i := 0; i < 200; i++ {
		got, err := p.Partition(msg, 6)
		if err != nil || got < 0 || got >= 6 {
			t.Fatalf("Partition(no key, 6) = %d, %v; want 0..5, nil", got, err)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Errorf("200 keyless records all went to partitions %v, want a spread", seen)
	}
}

func BenchmarkPartitionFor(b *testing.B) {
	key := int64Key(362)
	for i := 0; i < b.N; i++ {
		_ = PartitionFor(key, 12)
	}
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
)

// broker is a running Kafka cluster the benchmark talks to.
type broker struct {
	name  string // "kfake" or "Apache Kafka 4.1.1"
	addrs []string
	stop  func()
}

// startKfake starts an in-process kfake cluster on loopback. The group
// session timeout may go down to 1 s like on the real test broker (kfake's
// own minimum is 6 s); the benchmark uses 10 s for every system anyway.
func startKfake(partitions int) (*broker, error) {
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(partitions),
		kfake.GroupMinSessionTimeout(time.Second),
		kfake.ClusterID("keepstate-compare-goka"),
	)
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	return &broker{name: "kfake (in-process, franz-go v1.22.3)", addrs: c.ListenAddrs(), stop: c.Close}, nil
}

// startRealKafka starts Apache Kafka with the main repo's scripts/kafka.sh
// in dir; the script stops it by itself if this process dies.
func startRealKafka(repo, dir string) (*broker, error) {
	script := filepath.Join(repo, "scripts", "kafka.sh")
	if out, err := exec.Command("bash", script, "check").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("real kafka not available: %s", bytes.TrimSpace(out))
	}
	cmd := exec.Command("bash", script, "start", dir)
	cmd.Env = append(os.Environ(), "KEEPSTATE_KAFKA_OWNER_PID="+strconv.Itoa(os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kafka.sh start: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return nil, errors.New("kafka.sh start printed no address")
	}
	version := os.Getenv("KEEPSTATE_KAFKA_VERSION")
	if version == "" {
		version = "4.1.1"
	}
	return &broker{
		name:  "Apache Kafka " + version + " (KRaft, single node, scripts/kafka.sh)",
		addrs: []string{lines[len(lines)-1]},
		stop:  func() { _ = exec.Command("bash", script, "stop", dir).Run() },
	}, nil
}

// adminConfig is the sarama configuration of the benchmark's own clients.
func adminConfig() *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.ClientID = "compare-goka"
	sc.Producer.Return.Successes = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.DialTimeout = 5 * time.Second
	return sc
}

// createTopics creates topics with the given partition count (replication
// 1); a topic that exists already is fine.
func createTopics(addrs []string, partitions int32, topics ...string) error {
	admin, err := sarama.NewClusterAdmin(addrs, adminConfig())
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	defer admin.Close()
	for _, t := range topics {
		err := admin.CreateTopic(t, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return nil
}

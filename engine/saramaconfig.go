package engine

import (
	"time"

	"github.com/IBM/sarama"
)

// KafkaVersion is the protocol version every keepstate Kafka client
// speaks (Kafka 3.6; transactions with KIP-447 offset commits need 2.5+).
var KafkaVersion = sarama.V3_6_0_0

// NewSaramaConfig returns the base sarama configuration every keepstate
// client starts from: the protocol version, the client id and a 5 s dial
// timeout. Callers add what their role needs (producer, consumer, admin).
// It returns a new value on every call.
func NewSaramaConfig(clientID string) *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = KafkaVersion
	sc.ClientID = clientID
	sc.Net.DialTimeout = 5 * time.Second
	return sc
}

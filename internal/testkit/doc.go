// Package testkit holds test helpers shared by keepstate's tests: polling
// with a deadline, service requirements, and starters for an in-process
// Kafka (kfake), an in-process Schema Registry (srfake), a real redis-server
// and a real Apache Kafka broker. Only tests import it.
package testkit

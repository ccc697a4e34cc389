//go:build !unix

package testkit

// stopKafkaCluster has nothing to stop: the cluster runs on unix only.
func stopKafkaCluster() error { return nil }

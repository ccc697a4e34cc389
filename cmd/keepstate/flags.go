package main

// The flags of single subcommands. The flags shared with the app.Config of
// run, demo and reset, and the environment variable of every flag, are in
// internal/cli.

import (
	"flag"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/app/demo"
	"github.com/keepstate/keepstate/internal/cli"
)

// demoFlags registers the flags only the demo has.
func demoFlags(fs *flag.FlagSet, d *demo.Config) {
	fs.StringVar(&d.KafkaAddr, "kafka-addr", d.KafkaAddr, "listen address of the in-process Kafka broker")
	fs.StringVar(&d.RegistryAddr, "registry-addr", d.RegistryAddr, "listen address of the in-process Schema Registry")
	fs.Float64Var(&d.Rate, "rate", d.Rate, "generated ratings per second (0: no generator)")
	fs.Int64Var(&d.Movies, "movies", d.Movies, "number of distinct generated movies")
}

// produceFlags registers the flags of produce.
func produceFlags(fs *flag.FlagSet, p *app.ProduceConfig, fromStdin *bool, logLevel *string) {
	cli.BrokersFlag(fs, &p.Brokers)
	fs.StringVar(&p.SchemaRegistry, "schema-registry", p.SchemaRegistry, "Schema Registry URL")
	cli.RegistryAuthFlags(fs, &p.SchemaRegistryUser, &p.SchemaRegistryPassword, &p.SchemaRegistryPasswordFile)
	fs.StringVar(&p.Topic, "topic", p.Topic, "topic to send ratings to")
	fs.Int64Var(&p.Count, "count", p.Count, "ratings to generate (0: until interrupted)")
	fs.Int64Var(&p.Movies, "movies", p.Movies, "distinct movie ids (1..movies, Zipf-skewed popularity)")
	fs.Float64Var(&p.Rate, "rate", p.Rate, "ratings per second (0: as fast as possible)")
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "random seed of the generator")
	fs.BoolVar(fromStdin, "stdin", false, `read ratings as JSON lines from stdin: {"movie_id":362,"rating":10}`)
	fs.StringVar(logLevel, "log-level", *logLevel, "debug, info, warn or error")
}

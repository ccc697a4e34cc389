package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
	"github.com/keepstate/keepstate/web"
)

// Job is one job RunJobs runs: the movie job (Movies) or any job built
// with NewJob. A Job is a value; it is safe to pass to several RunJobs.
type Job struct {
	movies bool
	runner engine.Runner
	input  string
	output string
}

// Movies is keepstate's movie job (movies.Job): Avro ratings from
// --input-topic, averages to --output-topic, its state in the table
// movies, served at /tables/movies and, as a view of that table, at
// /movies.
func Movies() Job { return Job{movies: true} }

// NewJob returns j as a Job reading input and, when j has an Output
// function, writing output (which must then be set). Its table is j.Name.
func NewJob[K comparable, V, A any](j engine.Job[K, V, A], input, output string) (Job, error) {
	r, err := j.Runner()
	if err != nil {
		return Job{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if input == "" {
		return Job{}, fmt.Errorf("%w: job %s: no input topic", ErrConfig, j.Name)
	}
	if r.HasOutput() != (output != "") {
		return Job{}, fmt.Errorf("%w: job %s: an output topic is needed exactly when the job has an Output function", ErrConfig, j.Name)
	}
	return Job{runner: r, input: input, output: output}, nil
}

func (j Job) name() string {
	if j.movies {
		return movies.Name
	}
	return j.runner.Spec().Name
}

// checkJobs refuses an empty list and two jobs with one name.
func checkJobs(jobs []Job) error {
	if len(jobs) == 0 {
		return fmt.Errorf("%w: no job to run", ErrConfig)
	}
	seen := map[string]bool{}
	for _, j := range jobs {
		if !j.movies && j.runner == nil {
			return fmt.Errorf("%w: a Job must come from Movies or NewJob", ErrConfig)
		}
		if seen[j.name()] {
			return fmt.Errorf("%w: two jobs named %s", ErrConfig, j.name())
		}
		seen[j.name()] = true
	}
	return nil
}

// JobConfig is the engine configuration of a job other than the movie job:
// group "<application-id>-<job>", input and output topics of its own, and
// internal topics named after the group.
func (c Config) JobConfig(log *slog.Logger, name, input, output string) engine.Config {
	ec := c.EngineConfig(log)
	ec.ApplicationID = c.ApplicationID + "-" + name
	ec.InputTopic, ec.OutputTopic = input, output
	ec.RepartitionTopic = ec.ApplicationID + "-repartition"
	ec.ChangelogTopic = ec.ApplicationID + "-changelog"
	ec.DLQTopic = ec.ApplicationID + "-dlq"
	return ec
}

// engineConfig is the engine configuration j runs with under c.
func (j Job) engineConfig(c Config, log *slog.Logger) engine.Config {
	if j.movies {
		return c.EngineConfig(log)
	}
	return c.JobConfig(log, j.name(), j.input, j.output)
}

// partitionedStore is a store that keeps a partition's keys together (a
// Redis Cluster): it opens a table only knowing its partition count.
type partitionedStore interface{ NeedsPartitions() bool }

// oldLayoutRemover is a store that can delete what an older key layout
// left for a table, which it refuses to open until then (a Redis Cluster).
type oldLayoutRemover interface {
	RemoveOldLayout(ctx context.Context, table string) (bool, error)
}

// start builds j's engine on store and registers its table in opts.
func (j Job) start(ctx context.Context, c Config, store Store, reg *avro.Registry, advertise string,
	log *slog.Logger, opts *web.Options) (*engine.Engine, error) {
	runner, ec := j.runner, j.engineConfig(c, log)
	if j.movies {
		r, err := movies.Job(reg).Runner()
		if err != nil {
			return nil, err
		}
		runner = r
	}
	spec := runner.Spec()
	if ps, ok := store.(partitionedStore); ok && ps.NeedsPartitions() {
		// The engine creates the topics here rather than in Run, so that
		// the table is opened knowing its partition count.
		n, err := engine.PrepareTopics(ctx, ec)
		if err != nil {
			return nil, fmt.Errorf("job %s: %w", j.name(), err)
		}
		spec.Partitions = n
	}
	// ErrInvalid: most likely the job's indexes changed since the table was made.
	table, err := j.openTable(ctx, store, spec,
		"to rebuild the table from its changelog with the new indexes, delete it")
	if err != nil {
		return nil, err
	}
	ec.AdvertiseAddr = advertise
	eng, err := engine.NewJob(ec, table, runner)
	if err != nil {
		return nil, err
	}
	opts.Tables = append(opts.Tables, eng.View())
	return eng, nil
}

// openTable opens j's table; a table whose spec does not match
// (engine.ErrInvalid) is a configuration error, followed by fix.
func (j Job) openTable(ctx context.Context, store Store, spec engine.TableSpec, fix string) (engine.Table, error) {
	t, err := store.OpenTable(ctx, spec)
	if errors.Is(err, engine.ErrInvalid) {
		return nil, fmt.Errorf("%w: job %s: %w; %s (see docs/jobs.md, \"Changing a job\")", ErrConfig, j.name(), err, fix)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", j.name(), err)
	}
	return t, nil
}

// runEngines runs every engine until ctx ends or one fails; the first
// failure stops the others and is returned.
func runEngines(ctx context.Context, engines []*engine.Engine) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(engines))
	for _, e := range engines {
		go func() {
			err := e.Run(ctx)
			if err != nil {
				err = fmt.Errorf("job %s: %w", e.Job().Spec().Name, err)
			}
			errs <- err
			cancel()
		}()
	}
	var first error
	for range engines {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// engineSet is the engines of one RunJobs, as the API sees them.
type engineSet []*engine.Engine

// ready is nil when every engine is ready.
func (es engineSet) ready() error {
	var errs []error
	for _, e := range es {
		if err := e.Ready(); err != nil {
			if len(es) > 1 {
				err = fmt.Errorf("job %s: %w", e.Job().Spec().Name, err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// roles returns the partition roles of every engine, by table name.
func (es engineSet) roles() map[string][]engine.PartitionRole {
	out := make(map[string][]engine.PartitionRole, len(es))
	for _, e := range es {
		out[e.Job().Spec().Name] = e.Roles()
	}
	return out
}

// stats sums the engines' counters.
func (es engineSet) stats() engine.Stats {
	if len(es) == 1 {
		return es[0].Stats()
	}
	var sum engine.Stats
	for _, e := range es {
		sum = sum.Add(e.Stats())
	}
	return sum
}

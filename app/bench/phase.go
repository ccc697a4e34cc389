package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// benchPoll is how often the restart and restore phases ask the child.
const benchPoll = 5 * time.Millisecond

// restart kills the child with SIGKILL (starting it first if the previous
// phase stopped it) and times the restarted child's first exact answer
// for the most rated movie.
func (b *bench) restart(ctx context.Context) (PhaseResult, error) {
	pr := PhaseResult{Phase: PhaseRestart, Unit: "s"}
	if err := b.ensureChild(ctx); err != nil {
		return pr, err
	}
	b.child.Kill()
	if err := b.startChild(); err != nil {
		return pr, err
	}
	id, want := b.truth.MostRated()
	client := &http.Client{Timeout: 2 * time.Second}
	u := fmt.Sprintf("%s/movies/%d", b.api, id)
	at, err := b.pollUntil(ctx, func(ctx context.Context) bool {
		var m struct {
			Count  int64   `json:"count"`
			Rating float64 `json:"rating"`
		}
		return getJSON(ctx, client, u, &m) == nil && m.Count == want.Count && m.Rating == want.Avg()
	})
	if err != nil {
		return pr, err
	}
	pr.Note = fmt.Sprintf("first exact GET /movies/%d (count %d)", id, want.Count)
	err = b.measure(ctx, &pr, at)
	return pr, err
}

// ensureChild starts the child and waits until it is ready, unless it
// is running (the previous phase stopped it, or left it running).
func (b *bench) ensureChild(ctx context.Context) error {
	if b.child != nil && !b.child.Exited() {
		return nil
	}
	if err := b.startChild(); err != nil {
		return err
	}
	if err := b.waitReady(ctx); err != nil {
		return b.child.Failed(err)
	}
	return nil
}

// restore stops the child, deletes its store (the clover directory, or
// the Redis keys of the application) and times the restarted child until
// every partition is restored and running.
func (b *bench) restore(ctx context.Context) (PhaseResult, error) {
	pr := PhaseResult{Phase: PhaseRestore, Unit: "records/s"}
	b.stopChild()
	if err := b.wipeStore(ctx); err != nil {
		return pr, err
	}
	if err := b.startChild(); err != nil {
		return pr, err
	}
	defer b.profileIn(ctx, PhaseRestore)()
	var st benchStats
	at, err := b.pollUntil(ctx, func(ctx context.Context) bool {
		st = benchStats{}
		err := getJSON(ctx, &http.Client{Timeout: 2 * time.Second}, b.api+"/api/stats", &st)
		return err == nil && st.Ready && st.Stats.PartitionsAssigned > 0 &&
			st.Stats.PartitionsRunning == st.Stats.PartitionsAssigned
	})
	if err != nil {
		return pr, err
	}
	pr.Records = st.Stats.ChangelogRestored
	pr.Note = fmt.Sprintf("%d movies", b.truth.Movies())
	err = b.measure(ctx, &pr, at)
	return pr, err
}

// benchStats is the part of GET /api/stats the bench reads.
type benchStats struct {
	Ready bool `json:"ready"`
	Stats struct {
		ChangelogRestored  int64 `json:"changelogRestored"`
		PartitionsAssigned int64 `json:"partitionsAssigned"`
		PartitionsRunning  int64 `json:"partitionsRunning"`
	} `json:"stats"`
}

// waitReady waits until the child's /readyz answers 200.
func (b *bench) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	_, err := b.pollUntil(ctx, func(ctx context.Context) bool {
		return getJSON(ctx, client, b.api+"/readyz", nil) == nil
	})
	return err
}

// pollUntil calls ok every benchPoll until it returns true and returns the
// time that call started; it fails when ctx ends or the child exits.
func (b *bench) pollUntil(ctx context.Context, ok func(context.Context) bool) (time.Time, error) {
	for {
		at := time.Now()
		if ok(ctx) {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, b.child.Failed(ctx.Err())
		case <-b.child.done:
			return time.Time{}, b.child.Failed(errors.New("keepstate exited"))
		case <-time.After(benchPoll):
		}
	}
}

// wipeStore deletes the child's state: the clover directory, or every
// Redis key of the application (as `keepstate reset` does).
func (b *bench) wipeStore(ctx context.Context) error {
	dir := b.storeDir(0)
	if b.cfg.Store == app.StoreClover {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("delete the store: %w", err)
		}
		return nil
	}
	c := app.Default()
	c.Store, c.RedisURL, c.RedisMode, c.ApplicationID, c.DataDir = b.cfg.Store, b.cfg.RedisURL, b.cfg.RedisMode, b.appID, dir
	s, err := app.OpenStore(ctx, c, b.log)
	if err != nil {
		return err
	}
	defer s.Close()
	spec := movies.Spec
	spec.Partitions = b.cfg.Partitions // the internal topics have as many as the input topic
	t, err := s.OpenTable(ctx, spec)
	if err != nil {
		return err
	}
	r, ok := t.(engine.TableResetter)
	if !ok {
		return fmt.Errorf("the tables of store %s cannot be reset", c.Store)
	}
	if err := r.Reset(ctx); err != nil {
		return fmt.Errorf("reset the store: %w", err)
	}
	return nil
}

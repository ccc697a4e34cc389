package web

import (
	"context"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// ReplicaReader is an optional ability of a Table: reading a key from a
// standby copy on this instance when the partition's active cannot
// answer (engine.TableView.GetReplica). Implementations are safe for
// concurrent use.
type ReplicaReader interface {
	// GetReplica returns key's document from this instance's standby copy
	// and how stale the copy is: ErrUnavailable when there is none that
	// may answer, ErrNotFound when it has no such document.
	GetReplica(ctx context.Context, key []byte) (engine.Doc, engine.Staleness, error)
}

// ReplicaQuerier is an optional ability of a Table: answering an index
// query from the standby copies on this instance
// (engine.TableView.QueryReplicas), for partitions no active answered.
type ReplicaQuerier interface {
	// QueryReplicas answers q from the caught-up standby copies here and
	// returns the partitions it covers, sorted.
	QueryReplicas(ctx context.Context, q engine.IndexQuery) (engine.DocPage, []int32, error)
}

// replicaParam, set to 1 on a request forwarded between instances, asks
// the peer for its standby copy's answer.
const replicaParam = "replica"

// ActiveOnlyParam is the query parameter that, set to true, asks for an
// answer from the partition's active only: 503 rather than a standby's.
const ActiveOnlyParam = "activeOnly"

// Headers of an answer from a standby copy: ReplicaHeader names the copy
// ("standby"), LagRecordsHeader how many changelog offsets it was behind
// at its last read, LagMillisHeader how long ago that read ended.
const (
	ReplicaHeader    = "Keepstate-Replica"
	LagRecordsHeader = "Keepstate-Lag-Records"
	LagMillisHeader  = "Keepstate-Lag-Ms"
)

// staleJSON is the staleness of an answer from a standby copy.
type staleJSON struct {
	Records int64 `json:"records"`
	Ms      int64 `json:"ms"`
}

// setStaleHeaders marks the response as a standby's answer.
func setStaleHeaders(c echo.Context, st *staleJSON) {
	h := c.Response().Header()
	h.Set(ReplicaHeader, "standby")
	h.Set(LagRecordsHeader, strconv.FormatInt(st.Records, 10))
	h.Set(LagMillisHeader, strconv.FormatInt(st.Ms, 10))
}

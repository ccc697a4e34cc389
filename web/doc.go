// Package web is keepstate's HTTP server (echo): every job's table over a
// Table (GET /tables, GET /tables/{table}/{key}, GET /tables/{table}?index=
// ...), routed to the owning instance and merged across instances, the
// movie query API (GET /movies/{id}, GET /movies) as a view of the movie
// job's table, health and readiness probes, Prometheus metrics, the
// OpenAPI document with an embedded Swagger UI, and a small dashboard
// page. Every error is a JSON body {"error":"..."}; nothing is fetched from
// outside the process at run time.
//
// JSON numbers are written by encoding/json: an average of exactly 9 is
// rendered as 9, not 9.0 (the same JSON number). Movie ids are int64; clients
// in JavaScript lose precision above 2^53.
package web

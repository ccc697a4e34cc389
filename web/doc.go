// Package web is keepstate's HTTP server (echo): every job's Table (GET
// /tables, /tables/{table}/{key}, /tables/{table}?index=...), routed to the
// owning instance and merged across instances, the movie API (GET
// /movies/{id}, /movies) as a view of the movie job's table, health probes,
// Prometheus metrics, the OpenAPI document with an embedded Swagger UI and
// a dashboard. Every error is a JSON body {"error":"..."}; nothing is
// fetched from outside the process at run time.
//
// JSON numbers are written by encoding/json: an average of exactly 9 is
// rendered as 9, not 9.0 (the same JSON number). Movie ids are int64; clients
// in JavaScript lose precision above 2^53.
package web

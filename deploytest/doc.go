// Package deploytest checks the deployment files against the program: the
// k8s/ kustomizations (rendered with the kustomize API), docker-compose.yml
// with its Redis override, the Dockerfile and .dockerignore. Every
// KEEPSTATE_* setting they give must be a flag of `keepstate run` and
// validate, volumes must sit at the data directory, probes and health
// checks must hit real routes on the API port.
//
// It is a module of its own so that the main module does not require
// kustomize: `make lint` and `make unit` cover it (MODULES in the Makefile);
// by hand, `cd deploytest && go test ./...`. A replace directive points the
// keepstate requirement at this repository, so the tests always check the
// working tree's program.
package deploytest

// Package conformance runs the official OJS conformance test cases (the JSON step language of their
// test-case-reference.md) against a live `pronto serve` on every store:
// memory, SQLite, PostgreSQL, Redis, and Redis on a local 3-master Redis Cluster the test starts
// (redis-cluster). It has no API; its tests are the runner:
//
//	OJS_CONFORMANCE_DIR=/path/to/ojs/conformance go test ./server/conformance/
//
// The cases are read from OJS_CONFORMANCE_DIR. OJS_CONFORMANCE_LEVELS (default "0,1,2,3,4"), OJS_CONFORMANCE_STORES (default
// "memory,sqlite,postgres,redis,redis-cluster") and OJS_CONFORMANCE_RUN (a regular expression on test ids) narrow a run.
// PostgreSQL is reached through internal/testdb (PRONTO_TEST_DATABASE_URL); it is never skipped.
//
// The cases are not part of this repository. TestConformance fails when they are missing; the test
// command (scripts/test) leaves it out when OJS_CONFORMANCE_DIR is not set, says so in one line, and
// requires them when CI=true or OJS_CONFORMANCE_DIR is set. The project's own OJS tests live in server/.
package conformance

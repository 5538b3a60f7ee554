package store

// LocalInserter is implemented by stores whose Insert is an in-process operation with no round trip
// to a server (the memory store). The client does not merge concurrent single-job inserts into
// batched writes on them: merging saves round trips and transactions, which such a store does not
// have, and costs every caller a hand-off to the goroutine that writes.
type LocalInserter interface {
	// InsertsAreLocal reports whether Insert is in-process.
	InsertsAreLocal() bool
}

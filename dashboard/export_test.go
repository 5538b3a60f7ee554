package dashboard

// StreamCounts returns the event streams of this process open now and ever started, for the tests
// that check a page reconnecting holds one.
func StreamCounts() (open, started int64) { return streamsOpen.Load(), streamsStarted.Load() }

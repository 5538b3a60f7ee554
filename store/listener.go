package store

// ListenerStatus is implemented by stores whose notifications travel over a connection that can be
// lost (PostgreSQL's LISTEN connection). Metrics and health checks use it; stores that deliver
// notifications in process (memory, SQLite) do not implement it.
type ListenerStatus interface {
	// ListenerConnected reports whether the notification listener is connected now. It is false
	// too while no one subscribes (an insert-only client needs no listener).
	ListenerConnected() bool
}

package server

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Timeouts of the http.Server returned by NewHTTPServer.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = 120 * time.Second
	MaxHeaderBytes    = 64 << 10
)

// NewHTTPServer returns an http.Server for h on addr with pronto's timeouts set (read header, read,
// write and idle) and a bounded header size.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// ErrInsecureListen is returned by CheckListenAddr for a non-loopback address without an API key.
var ErrInsecureListen = errors.New("refusing to listen on a non-loopback address without an API key")

// IsLoopback reports whether addr ("host:port") listens on the loopback interface only. An empty
// host (":8080") listens on every interface, so it is not loopback.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// CheckListenAddr refuses to expose the API beyond this machine without authentication: addr must be
// a loopback address unless apiKey is set.
func CheckListenAddr(addr, apiKey string) error {
	lo, err := IsLoopback(addr)
	if err != nil {
		return err
	}
	if !lo && apiKey == "" {
		return fmt.Errorf("%w (%s): set --api-key or PRONTO_API_KEY, or listen on 127.0.0.1", ErrInsecureListen, addr)
	}
	return nil
}

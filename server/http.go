package server

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strings"
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
// write and idle) and a bounded header size. A GET or HEAD whose path holds dot segments
// ("/ojs/v1/../manifest", as the Java SDK asks for the manifest) is served the cleaned path, where
// http.ServeMux would redirect.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           cleanDotSegments(h),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// cleanDotSegments serves a GET or HEAD whose path holds "." or ".." segments as if it had asked for
// the cleaned path, which http.ServeMux would otherwise answer with a redirect that some clients do
// not follow. It is the very path the redirect names, and the handlers (with their authentication)
// see only that path, so nothing is reachable that was not before. Other methods, and paths written
// with percent-escapes, are passed on unchanged.
func cleanDotSegments(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.RawPath == "" && hasDotSegment(r.URL.Path) {
			clean := path.Clean(r.URL.Path)
			if strings.HasSuffix(r.URL.Path, "/") && clean != "/" {
				clean += "/" // as http.ServeMux cleans: a directory stays one
			}
			r2 := r.Clone(r.Context())
			r2.URL.Path = clean
			r = r2
		}
		h.ServeHTTP(w, r)
	})
}

// hasDotSegment reports whether an absolute path has a "." or ".." segment.
func hasDotSegment(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
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

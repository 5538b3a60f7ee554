package server

import (
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// CodeForbidden answers a request refused for where it comes from (a cross-site request, a Host
// that is not this server's).
const CodeForbidden = "forbidden"

// crossSite reports whether r is a browser's request from another origin that could change state: a
// method other than GET, HEAD or OPTIONS with an Origin (or, without one, Sec-Fetch-Site
// cross-site or same-site) that is not the server's own. OJS clients send neither header; a web
// page's fetch(..., {mode: "no-cors"}) sends its Origin, and without a JSON Content-Type needs no
// preflight, so without this check any page the operator opens could enqueue or pause.
func crossSite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host)
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	return false
}

// LoopbackGuard wraps h, the handler of a server that listens on loopback without an API key, so
// that it answers only requests whose Host is a loopback name or address (localhost, *.localhost,
// 127.0.0.0/8, ::1) or one of allowedHosts (names, with or without a port): a web page whose domain
// an attacker points at 127.0.0.1 (DNS rebinding) is same-origin with the server and would
// otherwise read every job and change any. Other requests get 403 forbidden. pronto serve uses it
// whenever no API key is set.
func LoopbackGuard(h http.Handler, allowedHosts []string) http.Handler {
	allowed := make(map[string]bool, len(allowedHosts))
	for _, a := range allowedHosts {
		allowed[strings.ToLower(a)] = true
	}
	refuse := &Server{log: slog.New(slog.DiscardHandler)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		name := host
		if h, _, err := net.SplitHostPort(host); err == nil {
			name = h
		}
		if loopbackName(name) || allowed[host] || allowed[name] {
			h.ServeHTTP(w, r)
			return
		}
		stampHeaders(w.Header(), r)
		e := errorf(http.StatusForbidden, CodeForbidden,
			"Host %q is not a loopback name: a server without an API key answers only requests to localhost, 127.0.0.1 or [::1]; set an API key, or allow the name (pronto serve --allowed-host)", r.Host)
		refuse.writeError(w, r, e)
	})
}

// loopbackName reports whether a Host name (without its port) can only mean this machine.
func loopbackName(name string) bool {
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

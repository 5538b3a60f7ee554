// Package dashboard serves pronto's web dashboard: live queue counts and charts, the clients
// connected to the store, jobs, workflows, cron schedules, rate limits and the dead-letter list,
// with the actions an operator needs. It reads and acts only through a *pronto.Client, so it works
// on every store. `pronto serve` mounts it at "/" beside the OJS API; a program can mount Handler on
// its own mux too.
//
// Assets are plain HTML, CSS and JavaScript embedded in the binary. Live updates are pushed with
// server-sent events: one hub per Handler takes a snapshot of the queue counts and the clients every
// second and folds in the client's job events, so a browser never polls the tables.
package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/store"
)

//go:embed assets
var assets embed.FS

// CookieName is the cookie holding the dashboard session when an API key is set.
const CookieName = "pronto_dashboard"

// Config configures a Handler.
type Config struct {
	// Client is the client the dashboard reads and acts through (required).
	Client *pronto.Client
	// APIKey, when set, must be given once on the login page; the browser then keeps a session cookie
	// derived from it (the key itself never goes into the cookie).
	APIKey string
	// ReadOnly hides and refuses every action that changes state.
	ReadOnly bool
	// Backend names the store for display ("sqlite", "postgres", "memory").
	Backend string
	// Logger receives handler errors; nil discards them.
	Logger *slog.Logger
	// Tick is how often live updates are pushed (default 1s).
	Tick time.Duration
	// PingInterval is how often the event stream sends a "ping" event (default 5s). The page
	// counts a stream silent for several intervals as lost, as when the server's host vanishes
	// without closing the connection, and reconnects.
	PingInterval time.Duration
	// MaxStreams bounds the live-update event streams (GET /api/events) open at once (default
	// DefaultMaxStreams): each holds a connection and a goroutine, so a script opening streams
	// cannot exhaust them. One more answers 503 with Retry-After; the page retries by itself.
	MaxStreams int
	// TrustForwardedProto says a TLS-terminating proxy in front of the dashboard sets
	// X-Forwarded-Proto and strips any the browser sent: the session cookie is then Secure when it
	// says "https", as it is when the dashboard serves TLS itself. Without it the header is
	// ignored, as anyone can send it, and behind such a proxy the cookie is not Secure. The proxy
	// is trusted to append the browser's address to X-Forwarded-For too: the login throttle counts
	// wrong keys by that address (the last hop) rather than the proxy's, which every browser shares.
	TrustForwardedProto bool
	// RequestTimeout bounds every request but the event stream (default DefaultRequestTimeout;
	// negative: no bound): a store that does not answer within it gets a 503 naming the timeout,
	// not a page that hangs.
	RequestTimeout time.Duration
}

// DefaultMaxStreams is Config.MaxStreams unless set, as the OJS API bounds its progress streams.
const DefaultMaxStreams = 1000

// Handler serves the dashboard. Create it with New; stop its live-update hub with Close.
type Handler struct {
	cfg    Config
	secret []byte // signs the session and CSRF tokens

	revoked revocations // logged-out sessions
	logins  *loginThrottle
	// maxBulk and maxScan are the bounds of one bulk action and of one filtered read (maxBulk and
	// maxMatchScan; tests lower them).
	maxBulk, maxScan int
	streams          atomic.Int64 // event streams open now, at most cfg.MaxStreams
	mux              *http.ServeMux
	page             *template.Template
	login            *template.Template
	hub              *hub
	log              *slog.Logger

	// batch is the most jobs one step of a bulk action reads or acts on (pronto.MaxBulkIDs; tests
	// lower it).
	batch int
}

// New returns a dashboard handler for cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Client == nil {
		return nil, errors.New("dashboard: Config.Client is required")
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = defaultPingInterval
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, log: log, mux: http.NewServeMux(), logins: newLoginThrottle(), maxBulk: maxBulk, maxScan: maxMatchScan, batch: pronto.MaxBulkIDs}
	h.revoked.log = log
	if ss, ok := cfg.Client.Store().(store.SettingStore); ok {
		h.revoked.ss = ss
	}
	if cfg.APIKey != "" {
		// Derived from the key, so sessions survive a restart (and reach every server sharing the
		// key) and all die when the key changes.
		m := hmac.New(sha256.New, []byte(cfg.APIKey))
		m.Write([]byte("pronto dashboard secret"))
		h.secret = m.Sum(nil)
	} else {
		h.secret = make([]byte, 32)
		if _, err := rand.Read(h.secret); err != nil {
			return nil, err
		}
	}
	var err error
	if h.page, err = template.ParseFS(assets, "assets/index.html"); err != nil {
		return nil, err
	}
	if h.login, err = template.ParseFS(assets, "assets/login.html"); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(assets, "assets")
	h.hub = newHub(cfg.Client, cfg.Tick, log)
	h.routes(static)
	return h, nil
}

// Close stops the live-update hub; open event streams end.
func (h *Handler) Close() { h.hub.close() }

func (h *Handler) sign(what string) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte(what))
	return hex.EncodeToString(m.Sum(nil))
}

// csrfToken is the token the page of session sid carries and every POST must echo in X-CSRF-Token.
// It is bound to the session, so another session's token is useless.
func (h *Handler) csrfToken(sid string) string { return h.sign("csrf:" + sid) }

// SessionTTL is how long a dashboard login lasts; the server checks it, whatever the browser keeps.
const SessionTTL = 30 * 24 * time.Hour

// newSession returns a new session cookie value: a random id and its expiry, signed.
func (h *Handler) newSession(now time.Time) (string, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return "", err
	}
	v := hex.EncodeToString(id) + "." + strconv.FormatInt(now.Add(SessionTTL).Unix(), 10)
	return v + "." + h.sign("session:"+v), nil
}

// session returns the id of r's session, its expiry, and whether r is logged in: with an API key, a
// cookie this key signed, not expired and not logged out; without one, always (the id empty).
func (h *Handler) session(r *http.Request) (string, time.Time, bool) {
	if h.cfg.APIKey == "" {
		return "", time.Time{}, true
	}
	c, err := r.Cookie(CookieName)
	if err != nil {
		return "", time.Time{}, false
	}
	id, rest, ok1 := strings.Cut(c.Value, ".")
	exp, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || subtle.ConstantTimeCompare([]byte(sig), []byte(h.sign("session:"+id+"."+exp))) != 1 {
		return "", time.Time{}, false
	}
	until, err := strconv.ParseInt(exp, 10, 64)
	now := time.Now()
	if err != nil || now.Unix() >= until {
		return "", time.Time{}, false
	}
	return id, time.Unix(until, 0), !h.revoked.revoked(r.Context(), id, now)
}

func (h *Handler) routes(static fs.FS) {
	// Every route but the event stream is bounded by Config.RequestTimeout.
	m := &boundedMux{h: h}
	m.HandleFunc("GET /{$}", h.index)
	m.HandleFunc("POST /login", h.doLogin)
	m.HandleFunc("POST /logout", h.doLogout)
	// Assets hold no data, and the login page needs them.
	m.Handle("GET /static/", http.StripPrefix("/static/", filesOnly(static)))
	m.Handle("GET /api/overview", h.authed(http.HandlerFunc(h.overview)))
	h.mux.Handle("GET /api/events", h.authed(http.HandlerFunc(h.events)))
	m.Handle("GET /api/jobs", h.authed(http.HandlerFunc(h.listJobs)))
	m.Handle("GET /api/jobs/{id}", h.authed(http.HandlerFunc(h.getJob)))
	m.Handle("POST /api/jobs/{id}/{action}", h.action(h.jobAction))
	m.Handle("POST /api/jobs/{id}/priority", h.action(h.setPriority))
	m.Handle("GET /api/count", h.authed(http.HandlerFunc(h.countJobs)))
	m.Handle("GET /api/csrf", h.authed(http.HandlerFunc(h.csrf)))
	m.Handle("POST /api/bulk", h.action(h.bulk))
	m.Handle("POST /api/queues/{name}/{action}", h.action(h.queueAction))
	m.Handle("GET /api/workflows", h.authed(http.HandlerFunc(h.listWorkflows)))
	m.Handle("GET /api/workflows/{id}", h.authed(http.HandlerFunc(h.getWorkflow)))
	m.Handle("POST /api/workflows/{id}/cancel", h.action(h.cancelWorkflow))
	m.Handle("GET /api/cron", h.authed(http.HandlerFunc(h.listCron)))
	m.Handle("POST /api/cron/{name}/{action}", h.action(h.cronAction))
	m.Handle("GET /api/ratelimits", h.authed(http.HandlerFunc(h.listRateLimits)))
	m.Handle("GET /api/deadletter", h.authed(http.HandlerFunc(h.listDeadLetter)))
}

// boundedMux registers routes on its Handler's mux, each bounded by Config.RequestTimeout.
type boundedMux struct{ h *Handler }

func (m *boundedMux) Handle(pattern string, next http.Handler) {
	m.h.mux.Handle(pattern, m.h.bounded(next))
}

func (m *boundedMux) HandleFunc(pattern string, next http.HandlerFunc) { m.Handle(pattern, next) }

// filesOnly serves the files of fsys, and 404 for a directory rather than its listing.
func filesOnly(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "" || strings.HasSuffix(name, "/") {
			http.NotFound(w, r)
			return
		}
		if fi, err := fs.Stat(fsys, name); err != nil || fi.IsDir() {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) loggedIn(r *http.Request) bool {
	_, _, ok := h.session(r)
	return ok
}

func (h *Handler) authed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.loggedIn(r) {
			writeError(w, http.StatusUnauthorized, "not logged in: open the dashboard and give the API key")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// action wraps a state-changing handler: logged in, not read-only, same origin, right CSRF token.
func (h *Handler) action(next http.HandlerFunc) http.Handler {
	return h.authed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.ReadOnly {
			writeError(w, http.StatusForbidden, "the dashboard is read-only (--ui-read-only)")
			return
		}
		if !sameOrigin(r) {
			writeError(w, http.StatusForbidden, "cross-origin request refused")
			return
		}
		sid, _, _ := h.session(r)
		tok := r.Header.Get("X-CSRF-Token")
		if subtle.ConstantTimeCompare([]byte(tok), []byte(h.csrfToken(sid))) != 1 {
			writeError(w, http.StatusForbidden, csrfRefused)
			return
		}
		next(w, r)
	}))
}

// GET /api/csrf: the session's CSRF token, for a page whose token went stale (a server without an
// API key signs with a secret of its own, so a restart changes every token). Only a same-origin
// script can read the answer.
func (h *Handler) csrf(w http.ResponseWriter, r *http.Request) {
	sid, _, _ := h.session(r)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]string{"token": h.csrfToken(sid)})
}

// csrfRefused is the error of a state-changing request without the session's CSRF token; the page
// recognises it, fetches the token again and retries once.
const csrfRefused = "missing or wrong CSRF token: reload the page"

// sameOrigin checks the Origin header when the browser sent one (every modern browser does on POST).
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func (h *Handler) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	sid, _, ok := h.session(r)
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		_ = h.login.Execute(w, map[string]any{"Error": r.URL.Query().Get("error") != ""})
		return
	}
	_ = h.page.Execute(w, map[string]any{
		"CSRF": h.csrfToken(sid), "ReadOnly": h.cfg.ReadOnly, "Backend": h.cfg.Backend, "Auth": h.cfg.APIKey != "",
	})
}

func (h *Handler) doLogin(w http.ResponseWriter, r *http.Request) {
	if h.cfg.APIKey == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	key := r.PostFormValue("key")
	addr := h.clientAddr(r)
	if wait := h.logins.admit(addr); wait > 0 {
		// Not checked: a guess made while waiting would tell its guesser whether it was right.
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = h.login.Execute(w, map[string]any{"Wait": secs})
		return
	}
	if subtle.ConstantTimeCompare([]byte(key), []byte(h.cfg.APIKey)) != 1 {
		http.Redirect(w, r, "/?error=1", http.StatusSeeOther)
		return
	}
	h.logins.succeeded(addr)
	v, err := h.newSession(time.Now())
	if err != nil {
		writeError(w, http.StatusInternalServerError, "cannot make a session: "+err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: v, Path: "/", HttpOnly: true, Secure: h.secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: int(SessionTTL / time.Second),
	})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// secure reports whether the browser reached r over TLS: served here, or, when the operator trusts
// the proxy (Config.TrustForwardedProto), the first X-Forwarded-Proto hop says https.
func (h *Handler) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !h.cfg.TrustForwardedProto {
		return false
	}
	first, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(first), "https")
}

func (h *Handler) doLogout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
		return
	}
	if id, until, ok := h.session(r); ok && id != "" {
		if err := h.revoked.revoke(r.Context(), id, until); err != nil {
			// Ended here all the same; other servers honour it until it expires.
			h.log.Error("pronto dashboard: cannot record the logout in the store", "err", err)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true, Secure: h.secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// nonEmpty returns vs without its empty strings (nil when none is left).
func nonEmpty(vs []string) []string {
	var out []string
	for _, v := range vs {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// splitList reads a comma-separated query parameter.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Command fleet_server answers for many simulated Kubernetes targets from one process.
//
// It is a benchmark tool: the operator's cost per healthy target is measured
// against it, because one real kube-apiserver per target does not fit on one
// machine past a handful. Behaviour claims stay with the real API server;
// tests/integration/test_fleet_server.py sends the operator's requests to
// both and compares the answers.
//
// Every target is served under its own path prefix, /t/<i>/, on one TLS
// port (HTTP/1.1 and HTTP/2, as kube-apiserver offers both), so a
// kubeconfig's server (https://127.0.0.1:<port>/t/<i>) names one target and
// 10,000 of them cost one listening socket. Each target starts as a copy of
// one seed (discovery documents and objects dumped from a real, healthy
// kube-apiserver by tests/testenv/fleet.py: a Provided target, or a Managed
// one with its Helm releases installed for real, tests/testenv/fleet_managed.py)
// and keeps its own objects, resourceVersions,
// event log and watches in memory; the seed's objects are shared until a
// target writes to a resource, which is then copied for it alone.
//
// What it serves: discovery (aggregated and legacy, as dumped), GET, LIST
// with label and field selectors and pages (limit/continue, remainingItemCount),
// WATCH from a resourceVersion (replayed from the event log; a version older
// than the log is the ERROR event with a 410 Expired Status, as the watch
// cache sends it) with bookmarks and timeoutSeconds, metadata-only answers
// (PartialObjectMetadata[List]), server-side apply, merge patch, create,
// replace (with the resourceVersion precondition), delete, and the status
// subresource. /control/stats counts connections, watches, reads and
// writes per target, and requests by verb and resource over all of them (a
// dry run counted as a write, as apiserver_request_total counts it, and named
// apart); /control/compact drops a target's event log, so a
// watch from before it gets 410.
//
// What it leaves out: authentication and authorization (every request is
// allowed), admission and validation (no schema, no defaulting, no
// immutable fields), field ownership (server-side apply merges maps and
// replaces lists, never reports a conflict, and writes no managedFields),
// strategic merge (treated as a JSON merge patch), JSON patch, finalizers and
// graceful deletion, garbage collection, controllers (nothing acts on what is
// written: a Gateway is Programmed only when a test patches its status),
// consistent snapshots of a paginated LIST (later pages are read from the
// current state), field selectors beyond a dotted path's string value,
// protobuf, Table, and every subresource but status.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ---- the seed --------------------------------------------------------------

type discoveryDoc struct {
	Path        string          `json:"path"`
	Aggregated  bool            `json:"aggregated"`
	ContentType string          `json:"contentType"`
	Body        json.RawMessage `json:"body"`
}

type seedObject struct {
	// group/version/resource, "" group for core: "/v1/nodes".
	Resource string          `json:"resource"`
	Object   json.RawMessage `json:"object"`
}

type seedFile struct {
	Discovery []discoveryDoc `json:"discovery"`
	Objects   []seedObject   `json:"objects"`
}

type resource struct {
	group, version, name, kind string
	namespaced                 bool
	hasStatus                  bool
}

func (r *resource) key() string { return r.group + "/" + r.version + "/" + r.name }

func (r *resource) apiVersion() string {
	if r.group == "" {
		return r.version
	}
	return r.group + "/" + r.version
}

// ---- objects ---------------------------------------------------------------

type entry struct {
	obj    map[string]any // read-only once stored
	raw    []byte         // obj as JSON
	ns     string
	name   string
	labels map[string]string
}

func newEntry(obj map[string]any) *entry {
	raw, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	meta, _ := obj["metadata"].(map[string]any)
	e := &entry{obj: obj, raw: raw, labels: map[string]string{}}
	e.ns, _ = meta["namespace"].(string)
	e.name, _ = meta["name"].(string)
	if l, ok := meta["labels"].(map[string]any); ok {
		for k, v := range l {
			s, _ := v.(string)
			e.labels[k] = s
		}
	}
	return e
}

func (e *entry) key() string { return e.ns + "/" + e.name }

func (e *entry) metadataOnly() []byte {
	b, _ := json.Marshal(map[string]any{
		"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": e.obj["metadata"],
	})
	return b
}

type event struct {
	rv       uint64
	res      string
	kind     string // ADDED, MODIFIED, DELETED
	old, new *entry // old nil for ADDED; for DELETED new is the last state
}

// ---- selectors -------------------------------------------------------------

type requirement struct {
	key, op string
	values  []string
}

func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseSelector(s string) ([]requirement, error) {
	var out []requirement
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range splitTop(s) {
		p := strings.TrimSpace(part)
		switch {
		case strings.Contains(p, " notin "), strings.Contains(p, " in "):
			op := "in"
			idx := strings.Index(p, " in ")
			if i := strings.Index(p, " notin "); i >= 0 {
				op, idx = "notin", i
			}
			rest := strings.TrimSpace(p[idx+len(op)+2:])
			if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
				return nil, fmt.Errorf("unable to parse requirement: %q", p)
			}
			var vals []string
			for _, v := range strings.Split(rest[1:len(rest)-1], ",") {
				vals = append(vals, strings.TrimSpace(v))
			}
			out = append(out, requirement{strings.TrimSpace(p[:idx]), op, vals})
		case strings.Contains(p, "!="):
			kv := strings.SplitN(p, "!=", 2)
			out = append(out, requirement{strings.TrimSpace(kv[0]), "!=", []string{strings.TrimSpace(kv[1])}})
		case strings.Contains(p, "=="):
			kv := strings.SplitN(p, "==", 2)
			out = append(out, requirement{strings.TrimSpace(kv[0]), "=", []string{strings.TrimSpace(kv[1])}})
		case strings.Contains(p, "="):
			kv := strings.SplitN(p, "=", 2)
			out = append(out, requirement{strings.TrimSpace(kv[0]), "=", []string{strings.TrimSpace(kv[1])}})
		case strings.HasPrefix(p, "!"):
			out = append(out, requirement{strings.TrimSpace(p[1:]), "!exists", nil})
		default:
			out = append(out, requirement{p, "exists", nil})
		}
	}
	return out, nil
}

func matches(reqs []requirement, get func(string) (string, bool)) bool {
	for _, r := range reqs {
		v, ok := get(r.key)
		switch r.op {
		case "=":
			if !ok || v != r.values[0] {
				return false
			}
		case "!=":
			if ok && v == r.values[0] {
				return false
			}
		case "in":
			if !ok || !contains(r.values, v) {
				return false
			}
		case "notin":
			if ok && contains(r.values, v) {
				return false
			}
		case "exists":
			if !ok {
				return false
			}
		case "!exists":
			if ok {
				return false
			}
		}
	}
	return true
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

func fieldValue(e *entry, path string) (string, bool) {
	var cur any = e.obj
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		cur, ok = m[p]
		if !ok {
			// An unset field compares as empty, as the server's field sets do.
			return "", true
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	}
	return "", true
}

type filter struct {
	ns     string
	labels []requirement
	fields []requirement
}

func (f *filter) match(e *entry) bool {
	if e == nil {
		return false
	}
	if f.ns != "" && e.ns != f.ns {
		return false
	}
	if !matches(f.labels, func(k string) (string, bool) { v, ok := e.labels[k]; return v, ok }) {
		return false
	}
	return matches(f.fields, func(k string) (string, bool) { return fieldValue(e, k) })
}

// ---- a target --------------------------------------------------------------

type counters struct {
	conns, watches, watchesStarted, reads, writes, requests atomic.Int64
}

type watcher struct {
	res      *resource
	filter   filter
	metaOnly bool
	ch       chan []byte
	closed   bool
}

type target struct {
	mu       sync.Mutex
	rv       uint64
	minRV    uint64                       // the oldest resourceVersion a watch may start from
	objs     map[string]map[string]*entry // resource key -> ns/name
	owned    map[string]bool              // resources copied from the seed for this target
	log      []event
	watchers map[string]map[*watcher]struct{}
	stats    counters
}

type server struct {
	seed      map[string]map[string]*entry
	seedRV    uint64
	resources map[string]*resource // group/version/resource
	discovery map[string][2]*discoveryDoc
	targets   []*target
	logSize   int
	bookmark  time.Duration
	// Requests by kind ("LIST core/v1/nodes", "WATCH ...", "GET discovery"),
	// every target together: what a settled shard still asks, and of what.
	kinds sync.Map // string -> *atomic.Int64
}

// count adds one request of this kind to the server's counts by kind.
func (s *server) count(kind string) {
	v, ok := s.kinds.Load(kind)
	if !ok {
		v, _ = s.kinds.LoadOrStore(kind, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

func (s *server) target(i int) *target {
	t := s.targets[i]
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.objs == nil {
		t.objs = make(map[string]map[string]*entry, len(s.seed))
		for k, v := range s.seed {
			t.objs[k] = v
		}
		t.owned = map[string]bool{}
		t.watchers = map[string]map[*watcher]struct{}{}
		t.rv, t.minRV = s.seedRV, s.seedRV
	}
	return t
}

// writable is the target's own copy of one resource's objects (t.mu held).
func (t *target) writable(res string) map[string]*entry {
	if !t.owned[res] {
		cp := make(map[string]*entry, len(t.objs[res]))
		for k, v := range t.objs[res] {
			cp[k] = v
		}
		t.objs[res] = cp
		t.owned[res] = true
	}
	return t.objs[res]
}

// commit stores new (or deletes old when new is nil) and tells the watches (t.mu held).
func (t *target) commit(s *server, res *resource, kind string, old, new *entry, logSize int) {
	t.rv++
	objs := t.writable(res.key())
	ev := event{rv: t.rv, res: res.key(), kind: kind, old: old, new: new}
	if kind == "DELETED" {
		delete(objs, old.key())
		ev.new = withRV(old, t.rv)
	} else {
		new = withRV(new, t.rv)
		ev.new = new
		objs[new.key()] = new
	}
	t.log = append(t.log, ev)
	if len(t.log) > logSize {
		drop := len(t.log) - logSize
		t.minRV = t.log[drop-1].rv
		t.log = append([]event(nil), t.log[drop:]...)
	}
	for w := range t.watchers[res.key()] {
		if line := w.line(ev); line != nil && !w.closed {
			select {
			case w.ch <- line:
			default:
				// A watch that does not keep up is ended, as the API server ends it.
				w.closed = true
				close(w.ch)
				delete(t.watchers[res.key()], w)
			}
		}
	}
}

func withRV(e *entry, rv uint64) *entry {
	obj := deepCopy(e.obj).(map[string]any)
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["resourceVersion"] = strconv.FormatUint(rv, 10)
	return newEntry(obj)
}

// line is what a watch with this filter sends for ev, or nil.
func (w *watcher) line(ev event) []byte {
	kind := ev.kind
	inNew, inOld := w.filter.match(ev.new), w.filter.match(ev.old)
	switch kind {
	case "ADDED":
		if !inNew {
			return nil
		}
	case "MODIFIED":
		switch {
		case inNew && inOld:
		case inNew:
			kind = "ADDED"
		case inOld:
			kind = "DELETED"
		default:
			return nil
		}
	case "DELETED":
		if !w.filter.match(ev.old) {
			return nil
		}
	}
	return eventLine(kind, ev.new, w.metaOnly)
}

func eventLine(kind string, e *entry, metaOnly bool) []byte {
	obj := e.raw
	if metaOnly {
		obj = e.metadataOnly()
	}
	var b bytes.Buffer
	b.WriteString(`{"type":"`)
	b.WriteString(kind)
	b.WriteString(`","object":`)
	b.Write(obj)
	b.WriteString("}\n")
	return b.Bytes()
}

// ---- HTTP ------------------------------------------------------------------

type connInfo struct {
	mu      sync.Mutex
	targets map[*target]bool
}

type ctxKey struct{}

func status(w http.ResponseWriter, code int, reason, message string, details map[string]any) {
	doc := map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code,
	}
	if details != nil {
		doc["details"] = details
	}
	writeJSON(w, code, "application/json", doc)
}

func writeJSON(w http.ResponseWriter, code int, contentType string, doc any) {
	b, _ := json.Marshal(doc)
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func notFound(w http.ResponseWriter, res *resource, name string) {
	qualified := res.name
	if res.group != "" {
		qualified += "." + res.group
	}
	status(w, 404, "NotFound", fmt.Sprintf("%s %q not found", qualified, name),
		map[string]any{"name": name, "group": res.group, "kind": res.name})
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/control/") {
		s.control(w, r)
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/t/"), "/", 2)
	i, err := strconv.Atoi(parts[0])
	if !strings.HasPrefix(r.URL.Path, "/t/") || err != nil || i < 0 || i >= len(s.targets) {
		status(w, 404, "NotFound", "the server could not find the requested resource", nil)
		return
	}
	t := s.target(i)
	if ci, ok := r.Context().Value(ctxKey{}).(*connInfo); ok {
		ci.mu.Lock()
		if !ci.targets[t] {
			ci.targets[t] = true
			t.stats.conns.Add(1)
		}
		ci.mu.Unlock()
	}
	t.stats.requests.Add(1)
	path := "/"
	if len(parts) == 2 {
		path += parts[1]
	}
	s.serveTarget(t, path, w, r)
}

func (s *server) serveTarget(t *target, path string, w http.ResponseWriter, r *http.Request) {
	switch path {
	case "/version":
		writeJSON(w, 200, "application/json", map[string]any{
			"major": "1", "minor": "34", "gitVersion": "v1.34.4-fleet", "platform": "linux/amd64",
		})
		return
	case "/healthz", "/readyz", "/livez":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
		return
	}
	if docs, ok := s.discovery[path]; ok && r.Method == http.MethodGet {
		t.stats.reads.Add(1)
		s.count("GET discovery")
		doc := docs[0]
		if docs[1] != nil && strings.Contains(r.Header.Get("Accept"), "as=APIGroupDiscoveryList") {
			doc = docs[1]
		}
		if doc == nil {
			doc = docs[1]
		}
		w.Header().Set("Content-Type", doc.ContentType)
		_, _ = w.Write(doc.Body)
		return
	}
	res, ns, name, sub, ok := s.parse(path)
	if !ok {
		status(w, 404, "NotFound", "the server could not find the requested resource", nil)
		return
	}
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet:
		if name != "" {
			t.stats.reads.Add(1)
			s.count("GET " + res.key())
			s.get(t, res, ns, name, w, r)
		} else if q.Get("watch") == "true" || q.Get("watch") == "1" {
			s.count("WATCH " + res.key())
			s.watch(t, res, ns, w, r)
		} else {
			t.stats.reads.Add(1)
			s.count("LIST " + res.key())
			s.list(t, res, ns, w, r)
		}
	case http.MethodPatch, http.MethodPut, http.MethodPost, http.MethodDelete:
		t.stats.writes.Add(1)
		if q.Get("dryRun") != "" {
			// Counted with the writes, as apiserver_request_total does, but told apart.
			s.count(r.Method + " " + res.key() + " (dry run)")
		} else {
			s.count(r.Method + " " + res.key())
		}
		s.write(t, res, ns, name, sub, w, r)
	default:
		status(w, 405, "MethodNotAllowed", "the server does not allow this method on the requested resource", nil)
	}
}

// parse splits /api/v1/namespaces/ns/pods/name/status and the like.
func (s *server) parse(path string) (res *resource, ns, name, sub string, ok bool) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	var gv string
	switch {
	case len(seg) >= 3 && seg[0] == "api":
		gv, seg = "/"+seg[1], seg[2:]
	case len(seg) >= 4 && seg[0] == "apis":
		gv, seg = seg[1]+"/"+seg[2], seg[3:]
	default:
		return nil, "", "", "", false
	}
	if len(seg) >= 3 && seg[0] == "namespaces" && s.resources[gv+"/"+seg[2]] != nil {
		ns, seg = seg[1], seg[2:]
	}
	res = s.resources[gv+"/"+seg[0]]
	if res == nil || (ns != "" && !res.namespaced) || len(seg) > 3 {
		return nil, "", "", "", false
	}
	if len(seg) >= 2 {
		name = seg[1]
	}
	if len(seg) == 3 {
		sub = seg[2]
		if sub != "status" {
			return nil, "", "", "", false
		}
	}
	return res, ns, name, sub, true
}

func metaOnly(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata")
}

func (s *server) get(t *target, res *resource, ns, name string, w http.ResponseWriter, r *http.Request) {
	t.mu.Lock()
	e := t.objs[res.key()][ns+"/"+name]
	t.mu.Unlock()
	if e == nil {
		notFound(w, res, name)
		return
	}
	if metaOnly(r) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(e.metadataOnly())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(e.raw)
}

func parseFilter(w http.ResponseWriter, ns string, r *http.Request) (filter, bool) {
	q := r.URL.Query()
	labels, err := parseSelector(q.Get("labelSelector"))
	if err != nil {
		status(w, 400, "BadRequest", err.Error(), nil)
		return filter{}, false
	}
	fields, err := parseSelector(q.Get("fieldSelector"))
	if err != nil {
		status(w, 400, "BadRequest", err.Error(), nil)
		return filter{}, false
	}
	return filter{ns: ns, labels: labels, fields: fields}, true
}

type continueToken struct {
	V     string `json:"v"`
	RV    uint64 `json:"rv"`
	Start string `json:"start"`
}

func (s *server) list(t *target, res *resource, ns string, w http.ResponseWriter, r *http.Request) {
	f, ok := parseFilter(w, ns, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	var tok continueToken
	if c := q.Get("continue"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || json.Unmarshal(raw, &tok) != nil {
			status(w, 400, "BadRequest", "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)", nil)
			return
		}
	}
	t.mu.Lock()
	if tok.V != "" && tok.RV < t.minRV {
		t.mu.Unlock()
		status(w, 410, "Expired", "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.", nil)
		return
	}
	objs := t.objs[res.key()]
	keys := make([]string, 0, len(objs))
	for k := range objs {
		if k >= tok.Start {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	rv := t.rv
	if tok.V != "" {
		rv = tok.RV
	}
	var items []*entry
	next := ""
	remaining := 0
	for idx, k := range keys {
		e := objs[k]
		if !f.match(e) {
			continue
		}
		if limit > 0 && len(items) == limit {
			next = k
			for _, k2 := range keys[idx:] {
				if f.match(objs[k2]) {
					remaining++
				}
			}
			break
		}
		items = append(items, e)
	}
	t.mu.Unlock()
	meta := map[string]any{"resourceVersion": strconv.FormatUint(rv, 10)}
	if next != "" {
		b, _ := json.Marshal(continueToken{V: "meta.k8s.io/v1", RV: rv, Start: next})
		meta["continue"] = base64.RawURLEncoding.EncodeToString(b)
		if len(f.labels) == 0 && len(f.fields) == 0 {
			meta["remainingItemCount"] = remaining
		}
	}
	var b bytes.Buffer
	mo := metaOnly(r)
	metaJSON, _ := json.Marshal(meta)
	if mo {
		b.WriteString(`{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":`)
	} else {
		fmt.Fprintf(&b, `{"kind":%q,"apiVersion":%q,"metadata":`, res.kind+"List", res.apiVersion())
	}
	b.Write(metaJSON)
	b.WriteString(`,"items":[`)
	for idx, e := range items {
		if idx > 0 {
			b.WriteByte(',')
		}
		if mo {
			b.Write(e.metadataOnly())
		} else {
			b.Write(e.raw)
		}
	}
	b.WriteString("]}")
	if mo {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	_, _ = w.Write(b.Bytes())
}

func (s *server) watch(t *target, res *resource, ns string, w http.ResponseWriter, r *http.Request) {
	f, ok := parseFilter(w, ns, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	timeout := 30*time.Minute + time.Duration(randInt(30*60))*time.Second
	if v, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && v > 0 {
		timeout = time.Duration(v) * time.Second
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	mo := metaOnly(r)
	wt := &watcher{res: res, filter: f, metaOnly: mo, ch: make(chan []byte, 256)}
	var first [][]byte
	rvParam := q.Get("resourceVersion")
	t.mu.Lock()
	from, err := strconv.ParseUint(rvParam, 10, 64)
	switch {
	case rvParam == "" || rvParam == "0":
		// From "any": the current objects as ADDED, then what follows.
		keys := make([]string, 0)
		for k := range t.objs[res.key()] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if e := t.objs[res.key()][k]; f.match(e) {
				first = append(first, eventLine("ADDED", e, mo))
			}
		}
	case err != nil:
		t.mu.Unlock()
		status(w, 400, "BadRequest", fmt.Sprintf("invalid resource version: %q", rvParam), nil)
		return
	case from < t.minRV:
		t.mu.Unlock()
		t.stats.watchesStarted.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		line, _ := json.Marshal(map[string]any{"type": "ERROR", "object": map[string]any{
			"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure",
			"message": fmt.Sprintf("too old resource version: %d (%d)", from, t.minRV),
			"reason":  "Expired", "code": 410,
		}})
		_, _ = w.Write(append(line, '\n'))
		return
	default:
		for _, ev := range t.log {
			if ev.rv > from && ev.res == res.key() {
				if line := wt.line(ev); line != nil {
					first = append(first, line)
				}
			}
		}
	}
	if t.watchers[res.key()] == nil {
		t.watchers[res.key()] = map[*watcher]struct{}{}
	}
	t.watchers[res.key()][wt] = struct{}{}
	t.mu.Unlock()
	t.stats.watches.Add(1)
	t.stats.watchesStarted.Add(1)
	defer func() {
		t.stats.watches.Add(-1)
		t.mu.Lock()
		if !wt.closed {
			wt.closed = true
			delete(t.watchers[res.key()], wt)
		}
		t.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(200)
	flusher, _ := w.(http.Flusher)
	for _, line := range first {
		_, _ = w.Write(line)
	}
	if flusher != nil {
		flusher.Flush()
	}
	end := time.NewTimer(timeout)
	defer end.Stop()
	var tick <-chan time.Time
	if bookmarks {
		// The watch cache sends a bookmark about once a minute.
		ticker := time.NewTicker(s.bookmark)
		defer ticker.Stop()
		tick = ticker.C
	}
	bookmark := func() {
		t.mu.Lock()
		rv := t.rv
		t.mu.Unlock()
		kind, apiVersion := res.kind, res.apiVersion()
		if mo {
			kind, apiVersion = "PartialObjectMetadata", "meta.k8s.io/v1"
		}
		line, _ := json.Marshal(map[string]any{"type": "BOOKMARK", "object": map[string]any{
			"kind": kind, "apiVersion": apiVersion,
			"metadata": map[string]any{"resourceVersion": strconv.FormatUint(rv, 10)},
		}})
		_, _ = w.Write(append(line, '\n'))
		if flusher != nil {
			flusher.Flush()
		}
	}
	for {
		select {
		case line, open := <-wt.ch:
			if !open {
				return
			}
			if _, err := w.Write(line); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		case <-tick:
			bookmark()
		case <-end.C:
			if bookmarks {
				bookmark()
			}
			return
		case <-r.Context().Done():
			return
		}
	}
}

func randInt(n int) int {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return int(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])) % n
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, vv := range x {
			m[k] = deepCopy(vv)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, vv := range x {
			l[i] = deepCopy(vv)
		}
		return l
	}
	return v
}

// mergePatch is RFC 7386: maps merge, null deletes, anything else replaces.
func mergePatch(dst, patch map[string]any) map[string]any {
	out := deepCopy(dst).(map[string]any)
	for k, v := range patch {
		if v == nil {
			delete(out, k)
			continue
		}
		if pm, ok := v.(map[string]any); ok {
			if dm, ok := out[k].(map[string]any); ok {
				out[k] = mergePatch(dm, pm)
				continue
			}
			out[k] = mergePatch(map[string]any{}, pm)
			continue
		}
		out[k] = deepCopy(v)
	}
	return out
}

func newUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (s *server) write(t *target, res *resource, ns, name, sub string, w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
	if err != nil {
		status(w, 400, "BadRequest", err.Error(), nil)
		return
	}
	var doc map[string]any
	if r.Method != http.MethodDelete && len(body) > 0 {
		if err := json.Unmarshal(body, &doc); err != nil {
			status(w, 400, "BadRequest", "the body of the request was in an unknown format", nil)
			return
		}
	}
	contentType := r.Header.Get("Content-Type")
	if r.Method == http.MethodPatch && strings.HasPrefix(contentType, "application/json-patch+json") {
		status(w, 415, "UnsupportedMediaType", "the fleet server does not serve JSON patch", nil)
		return
	}
	if r.Method == http.MethodPost {
		meta, _ := doc["metadata"].(map[string]any)
		name, _ = meta["name"].(string)
	}
	if name == "" {
		status(w, 405, "MethodNotAllowed", "the server does not allow this method on the requested resource", nil)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	key := ns + "/" + name
	old := t.objs[res.key()][key]
	if ns != "" {
		if t.objs["/v1/namespaces"]["/"+ns] == nil && (old == nil) {
			qualified := res.name
			if res.group != "" {
				qualified += "." + res.group
			}
			_ = qualified
			status(w, 404, "NotFound", fmt.Sprintf("namespaces %q not found", ns),
				map[string]any{"name": ns, "kind": "namespaces"})
			return
		}
	}
	apply := r.Method == http.MethodPatch && strings.HasPrefix(contentType, "application/apply-patch")
	var next map[string]any
	switch {
	case r.Method == http.MethodDelete:
		if old == nil {
			notFound(w, res, name)
			return
		}
		t.commit(s, res, "DELETED", old, nil, s.logSize)
		writeRaw(w, 200, old.raw)
		return
	case r.Method == http.MethodPost:
		if old != nil {
			status(w, 409, "AlreadyExists", fmt.Sprintf("%s %q already exists", qualifiedName(res), name),
				map[string]any{"name": name, "group": res.group, "kind": res.name})
			return
		}
		next = doc
	case r.Method == http.MethodPut:
		if old == nil {
			notFound(w, res, name)
			return
		}
		meta, _ := doc["metadata"].(map[string]any)
		oldMeta, _ := old.obj["metadata"].(map[string]any)
		if rv, _ := meta["resourceVersion"].(string); rv != "" && rv != oldMeta["resourceVersion"] {
			status(w, 409, "Conflict", fmt.Sprintf("Operation cannot be fulfilled on %s %q: the object has been modified; please apply your changes to the latest version and try again", qualifiedName(res), name),
				map[string]any{"name": name, "group": res.group, "kind": res.name})
			return
		}
		next = doc
	case old == nil && !apply:
		notFound(w, res, name)
		return
	case old == nil:
		next = doc
	default:
		next = mergePatch(old.obj, doc)
	}
	if sub == "status" && old == nil {
		notFound(w, res, name)
		return
	}
	next = deepCopy(next).(map[string]any)
	next["apiVersion"], next["kind"] = res.apiVersion(), res.kind
	meta, _ := next["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		next["metadata"] = meta
	}
	meta["name"] = name
	if ns != "" {
		meta["namespace"] = ns
	}
	if apply {
		manage(meta, r.URL.Query().Get("fieldManager"), sub, res.apiVersion(), doc)
	}
	if old == nil {
		meta["uid"] = newUID()
		meta["creationTimestamp"] = time.Now().UTC().Format(time.RFC3339)
		meta["generation"] = float64(1)
		delete(meta, "resourceVersion")
		if res.hasStatus && sub == "" {
			delete(next, "status")
		}
	} else {
		oldMeta, _ := old.obj["metadata"].(map[string]any)
		for _, k := range []string{"uid", "creationTimestamp", "generation", "resourceVersion"} {
			if v, ok := oldMeta[k]; ok {
				meta[k] = v
			}
		}
		if sub == "status" {
			// The status subresource writes the status and metadata, never the rest.
			keep := deepCopy(old.obj).(map[string]any)
			if st, ok := next["status"]; ok {
				keep["status"] = st
			} else {
				delete(keep, "status")
			}
			keep["metadata"] = meta
			next = keep
		} else if res.hasStatus {
			if st, ok := old.obj["status"]; ok {
				next["status"] = deepCopy(st)
			} else {
				delete(next, "status")
			}
		}
		if sub == "" && !jsonEqual(next["spec"], old.obj["spec"]) {
			if g, ok := oldMeta["generation"].(float64); ok {
				meta["generation"] = g + 1
			}
		}
		if jsonEqual(next, old.obj) && r.URL.Query().Get("dryRun") == "" {
			// Nothing changed: no new resourceVersion and no event, as the API server does.
			writeRaw(w, 200, old.raw)
			return
		}
	}
	if r.URL.Query().Get("dryRun") != "" {
		// Answered as it would be stored, and not stored.
		b, _ := json.Marshal(next)
		code := 200
		if old == nil {
			code = 201
		}
		writeRaw(w, code, b)
		return
	}
	code, kind := 200, "MODIFIED"
	if old == nil {
		code, kind = 201, "ADDED"
	}
	t.commit(s, res, kind, old, newEntry(next), s.logSize)
	writeRaw(w, code, t.objs[res.key()][key].raw)
}

func qualifiedName(res *resource) string {
	if res.group == "" {
		return res.name
	}
	return res.name + "." + res.group
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func writeRaw(w http.ResponseWriter, code int, raw []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(raw)
}

// fieldSet is the fieldsV1 of what an apply body sets: every list owned whole.
func fieldSet(v map[string]any, top bool) map[string]any {
	out := map[string]any{}
	for k, x := range v {
		if top && (k == "apiVersion" || k == "kind") {
			continue
		}
		if m, ok := x.(map[string]any); ok {
			inner := m
			if top && k == "metadata" {
				inner = map[string]any{}
				for mk, mv := range m {
					if mk != "name" && mk != "namespace" && mk != "resourceVersion" && mk != "managedFields" {
						inner[mk] = mv
					}
				}
			}
			out["f:"+k] = fieldSet(inner, false)
			continue
		}
		out["f:"+k] = map[string]any{}
	}
	return out
}

// manage records manager's applied fields in managedFields, replacing its last apply's.
func manage(meta map[string]any, manager, sub, apiVersion string, body map[string]any) {
	if manager == "" {
		manager = "unknown"
	}
	var kept []any
	fields := fieldSet(body, true)
	if list, ok := meta["managedFields"].([]any); ok {
		for _, e := range list {
			m, _ := e.(map[string]any)
			if m != nil && m["manager"] == manager && m["operation"] == "Apply" && (m["subresource"] == nil) == (sub == "") {
				if jsonEqual(m["fieldsV1"], fields) {
					// The same fields applied again: the entry, and its time, stay.
					return
				}
				continue
			}
			kept = append(kept, e)
		}
	}
	entry := map[string]any{
		"manager": manager, "operation": "Apply", "apiVersion": apiVersion,
		"time": time.Now().UTC().Format(time.RFC3339), "fieldsType": "FieldsV1",
		"fieldsV1": fields,
	}
	if sub != "" {
		entry["subresource"] = sub
	}
	meta["managedFields"] = append(kept, entry)
}

// ---- control -----------------------------------------------------------------

func (s *server) control(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/control/stats":
		type stat struct {
			Conns, Watches, WatchesStarted, Reads, Writes, Requests int64
		}
		var total stat
		per := map[string]stat{}
		detail := r.URL.Query().Get("detail") != ""
		active := 0
		for i, t := range s.targets {
			st := stat{
				t.stats.conns.Load(), t.stats.watches.Load(), t.stats.watchesStarted.Load(),
				t.stats.reads.Load(), t.stats.writes.Load(), t.stats.requests.Load(),
			}
			if st.Requests > 0 {
				active++
			}
			total.Conns += st.Conns
			total.Watches += st.Watches
			total.WatchesStarted += st.WatchesStarted
			total.Reads += st.Reads
			total.Writes += st.Writes
			total.Requests += st.Requests
			if detail {
				per[strconv.Itoa(i)] = st
			}
		}
		kinds := map[string]int64{}
		s.kinds.Range(func(k, v any) bool {
			kinds[k.(string)] = v.(*atomic.Int64).Load()
			return true
		})
		doc := map[string]any{"targets": len(s.targets), "active": active, "total": total, "byKind": kinds}
		if detail {
			doc["perTarget"] = per
		}
		writeJSON(w, 200, "application/json", doc)
	case "/control/compact":
		// A target's event log dropped: a watch from before now gets 410.
		i, err := strconv.Atoi(r.URL.Query().Get("target"))
		if err != nil || i < 0 || i >= len(s.targets) {
			status(w, 400, "BadRequest", "target: an index", nil)
			return
		}
		t := s.target(i)
		t.mu.Lock()
		// Past every version so far, as a compaction of etcd after a write is.
		t.rv++
		t.log, t.minRV = nil, t.rv
		t.mu.Unlock()
		writeJSON(w, 200, "application/json", map[string]any{"resourceVersion": strconv.FormatUint(t.rv, 10)})
	default:
		status(w, 404, "NotFound", "no such control endpoint", nil)
	}
}

// ---- start ---------------------------------------------------------------------

func load(path string) (*server, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var seed seedFile
	if err := json.Unmarshal(raw, &seed); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &server{
		seed: map[string]map[string]*entry{}, resources: map[string]*resource{},
		discovery: map[string][2]*discoveryDoc{},
	}
	for i := range seed.Discovery {
		d := &seed.Discovery[i]
		docs := s.discovery[d.Path]
		if d.Aggregated {
			docs[1] = d
		} else {
			docs[0] = d
		}
		s.discovery[d.Path] = docs
		if d.Aggregated || !(strings.HasPrefix(d.Path, "/api/") || strings.HasPrefix(d.Path, "/apis/")) {
			continue
		}
		var list struct {
			GroupVersion string `json:"groupVersion"`
			Resources    []struct {
				Name       string `json:"name"`
				Kind       string `json:"kind"`
				Namespaced bool   `json:"namespaced"`
			} `json:"resources"`
		}
		if err := json.Unmarshal(d.Body, &list); err != nil || list.GroupVersion == "" {
			continue
		}
		group, version := "", list.GroupVersion
		if g, v, ok := strings.Cut(list.GroupVersion, "/"); ok {
			group, version = g, v
		}
		for _, rr := range list.Resources {
			if base, sub, ok := strings.Cut(rr.Name, "/"); ok {
				if sub == "status" {
					if res := s.resources[group+"/"+version+"/"+base]; res != nil {
						res.hasStatus = true
					}
				}
				continue
			}
			s.resources[group+"/"+version+"/"+rr.Name] = &resource{
				group: group, version: version, name: rr.Name, kind: rr.Kind, namespaced: rr.Namespaced,
			}
		}
	}
	// Subresources are listed after their resource; a second pass catches any that were not.
	for i := range seed.Discovery {
		d := &seed.Discovery[i]
		if d.Aggregated {
			continue
		}
		var list struct {
			GroupVersion string `json:"groupVersion"`
			Resources    []struct {
				Name string `json:"name"`
			} `json:"resources"`
		}
		if json.Unmarshal(d.Body, &list) != nil {
			continue
		}
		g, v, ok := strings.Cut(list.GroupVersion, "/")
		if !ok {
			g, v = "", list.GroupVersion
		}
		for _, rr := range list.Resources {
			if base, sub, ok := strings.Cut(rr.Name, "/"); ok && sub == "status" {
				if res := s.resources[g+"/"+v+"/"+base]; res != nil {
					res.hasStatus = true
				}
			}
		}
	}
	var maxRV uint64
	for _, o := range seed.Objects {
		var obj map[string]any
		if err := json.Unmarshal(o.Object, &obj); err != nil {
			return nil, err
		}
		e := newEntry(obj)
		if s.seed[o.Resource] == nil {
			s.seed[o.Resource] = map[string]*entry{}
		}
		s.seed[o.Resource][e.key()] = e
		meta, _ := obj["metadata"].(map[string]any)
		if rv, err := strconv.ParseUint(fmt.Sprint(meta["resourceVersion"]), 10, 64); err == nil && rv > maxRV {
			maxRV = rv
		}
	}
	s.seedRV = maxRV
	return s, nil
}

func certificate(dir string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "fleet-server"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	// Self-signed and its own CA: the kubeconfig carries it as certificate-authority-data.
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), certPEM, 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func main() {
	seedPath := flag.String("seed", "", "the seed: discovery and objects of a healthy target (seed.py)")
	n := flag.Int("targets", 1, "how many targets to serve, /t/0 to /t/N-1")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	dir := flag.String("dir", ".", "where ca.crt and the address file are written")
	logSize := flag.Int("log-size", 1000, "events each target keeps for watches to resume from")
	bookmark := flag.Duration("bookmark", time.Minute, "how often a watch gets a bookmark")
	flag.Parse()
	s, err := load(*seedPath)
	if err != nil {
		log.Fatal(err)
	}
	s.logSize, s.bookmark = *logSize, *bookmark
	s.targets = make([]*target, *n)
	for i := range s.targets {
		s.targets[i] = &target{}
	}
	cert, err := certificate(*dir)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	conns := sync.Map{}
	srv := &http.Server{
		Handler: s,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			NextProtos:   []string{"h2", "http/1.1"},
		},
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1000},
		ConnContext: func(ctx2 context.Context, c net.Conn) context.Context {
			ci := &connInfo{targets: map[*target]bool{}}
			conns.Store(c, ci)
			return context.WithValue(ctx2, ctxKey{}, ci)
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if st != http.StateClosed && st != http.StateHijacked {
				return
			}
			if v, ok := conns.LoadAndDelete(c); ok {
				ci := v.(*connInfo)
				ci.mu.Lock()
				for t := range ci.targets {
					t.stats.conns.Add(-1)
				}
				ci.mu.Unlock()
			}
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	addr := ln.Addr().String()
	if err := os.WriteFile(filepath.Join(*dir, "address"), []byte(addr), 0o644); err != nil {
		log.Fatal(err)
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "fleet server: %d targets at https://%s/t/<i>\n", *n, addr)
	w.Flush()
	log.Fatal(srv.ServeTLS(ln, "", ""))
}

// Command counter is the ate example workload: a tiny HTTP server whose state shows what a
// snapshot kept. GET / increments an in-memory counter and a counter kept in
// $DATA_DIR/count.txt and answers {"ip": ..., "memory_count": N, "file_count": M}, where ip is
// the local address the request arrived on. /readyz answers 200 once the data dir is writable.
// /slow?ms=N answers after N ms and /whoami answers {"who": $WHO}; neither counts.
//
// Idle keep-alive connections are closed after ~1 s: gVisor cannot checkpoint a connected
// socket cleanly, so a suspended actor should hold none.
package main

import (
	"encoding/json"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type server struct {
	dataDir     string
	mu          sync.Mutex
	memoryCount int64
	ready       atomic.Bool
}

func (s *server) fileCountPath() string { return filepath.Join(s.dataDir, "count.txt") }

// bumpFile increments the counter in count.txt (written via a temp file and rename).
func (s *server) bumpFile() (int64, error) {
	var n int64
	if b, err := os.ReadFile(s.fileCountPath()); err == nil {
		n, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	} else if !os.IsNotExist(err) {
		return 0, err
	}
	n++
	tmp := s.fileCountPath() + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(n, 10)+"\n"), 0o644); err != nil {
		return 0, err
	}
	return n, os.Rename(tmp, s.fileCountPath())
}

func (s *server) root(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.memoryCount++
	mem := s.memoryCount
	file, err := s.bumpFile()
	s.mu.Unlock()
	if err != nil {
		http.Error(w, "data dir: "+err.Error(), http.StatusInternalServerError)
		return
	}
	ip := ""
	if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if host, _, err := net.SplitHostPort(addr.String()); err == nil {
			ip = host
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ip": ip, "memory_count": mem, "file_count": file})
}

// slow answers {"slept_ms": N} after sleeping ?ms=N milliseconds (at most 60000), without
// counting: a request that stays in flight, for drains before a checkpoint.
func (s *server) slow(w http.ResponseWriter, r *http.Request) {
	ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
	if ms < 0 || ms > 60000 {
		ms = 0
	}
	time.Sleep(time.Duration(ms) * time.Millisecond)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"slept_ms": ms})
}

// whoami answers {"who": $WHO} (the template's env), without counting: which actor answered.
func (s *server) whoami(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"who": os.Getenv("WHO")})
}

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	s := &server{dataDir: os.Getenv("DATA_DIR")}
	if s.dataDir == "" {
		s.dataDir = "/data"
	}
	go func() {
		for {
			err := os.MkdirAll(s.dataDir, 0o755)
			if err == nil {
				probe := filepath.Join(s.dataDir, ".writable")
				if err = os.WriteFile(probe, []byte("ok"), 0o644); err == nil {
					_ = os.Remove(probe)
					s.ready.Store(true)
					return
				}
			}
			log.Printf("data dir %s not writable yet: %v", s.dataDir, err)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("/", s.root)
	mux.HandleFunc("/readyz", s.readyz)
	mux.HandleFunc("/slow", s.slow)
	mux.HandleFunc("/whoami", s.whoami)
	srv := &http.Server{
		Addr:              "0.0.0.0:" + port,
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       time.Second,
	}
	log.Printf("counter: listening on %s, data dir %s", srv.Addr, s.dataDir)
	log.Fatal(srv.ListenAndServe())
}

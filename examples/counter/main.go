// Command counter is the ate example workload: a tiny HTTP server whose state shows what a
// snapshot kept. GET / increments an in-memory counter and a counter kept in
// $DATA_DIR/count.txt and answers {"ip": ..., "memory_count": N, "file_count": M}, where ip is
// the local address the request arrived on. /readyz answers 200 once the data dir is writable.
// /slow?ms=N answers after N ms and /whoami answers {"who": $WHO}; neither counts. /ws is a
// WebSocket (RFC 6455, written here with the standard library only): each text message counts
// in memory and is answered {"echo": message, "memory_count": N}. /local/<path> relays a call to
// ate's local endpoint (see local below), so an actor can suspend itself or ask for a wake.
// POST /fetch makes an outbound request from inside the sandbox (fetch.go), through ate's
// egress proxy or around it. POST /restored takes ate's post_restore notices, GET /restored lists
// them, GET /random answers 16 fresh random bytes (restored.go).
//
// Idle keep-alive connections are closed after ~1 s: gVisor cannot checkpoint a connected
// socket cleanly, so a suspended actor should hold none.
//
// $BALLAST_MB (default 0) makes it hold that many MiB of memory, every page written (half of
// each page pseudo-random bytes, half repeated text, as a heap holds both), so that a benchmark
// can checkpoint and restore an actor with real memory.
package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
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
	log.Printf("counted: memory_count %d, file_count %d", mem, file)
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

// local relays a call to ate's local endpoint ($ATE_LOCAL_ENDPOINT, http://169.254.100.1): the
// request /local/<path> becomes the same method on <endpoint>/<path> with the same body, and the
// answer is {"status": N, "body": "..."} (502 {"error": ...} when the endpoint could not be
// reached). ?via=<host:port> sends it to that address instead and ?target=<atespace>/<name> sets
// the ate-target-actor header, to show what the endpoint refuses. Keep-alives are off: a suspended actor should hold no connection.
func (s *server) local(w http.ResponseWriter, r *http.Request) {
	base := os.Getenv("ATE_LOCAL_ENDPOINT")
	if via := r.URL.Query().Get("via"); via != "" {
		base = "http://" + via
	}
	if base == "" {
		http.Error(w, "ATE_LOCAL_ENDPOINT is not set", http.StatusInternalServerError)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, base+strings.TrimPrefix(r.URL.Path, "/local"), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out.Header.Set("Content-Type", "application/json")
	if target := r.URL.Query().Get("target"); target != "" {
		out.Header.Set("ate-target-actor", target)
	}
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	w.Header().Set("Content-Type", "application/json")
	answer, err := client.Do(out)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": err.Error()})
		return
	}
	defer answer.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(answer.Body, 1<<20))
	_ = json.NewEncoder(w).Encode(map[string]any{"status": answer.StatusCode, "body": string(body)})
}

const websocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// ws upgrades to a WebSocket and answers each text message with the echo and the in-memory
// count after counting it; answers pings, and a close with a close.
func (s *server) ws(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || key == "" {
		http.Error(w, "a WebSocket upgrade is expected here", http.StatusBadRequest)
		return
	}
	hijacker, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "cannot upgrade", http.StatusInternalServerError)
		return
	}
	conn, rw, err := hijacker.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	sum := sha1.Sum([]byte(key + websocketGUID))
	accept := base64.StdEncoding.EncodeToString(sum[:])
	_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + accept + "\r\n\r\n")
	if rw.Flush() != nil {
		return
	}
	for {
		opcode, payload, err := readFrame(rw.Reader)
		if err != nil {
			return
		}
		switch opcode {
		case 1: // text
			s.mu.Lock()
			s.memoryCount++
			mem := s.memoryCount
			s.mu.Unlock()
			answer, _ := json.Marshal(map[string]any{"echo": string(payload), "memory_count": mem})
			if writeFrame(rw.Writer, 1, answer) != nil {
				return
			}
		case 8: // close: answer with the same code
			_ = writeFrame(rw.Writer, 8, payload)
			return
		case 9: // ping
			if writeFrame(rw.Writer, 10, payload) != nil {
				return
			}
		}
	}
}

// readFrame reads one client frame (masked, unfragmented; at most 1 MiB).
func readFrame(r *bufio.Reader) (byte, []byte, error) {
	var head [2]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	opcode := head[0] & 0x0f
	length := uint64(head[1] & 0x7f)
	switch length {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(r, ext[:]); err != nil {
			return 0, nil, err
		}
		length = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(r, ext[:]); err != nil {
			return 0, nil, err
		}
		length = binary.BigEndian.Uint64(ext[:])
	}
	if length > 1<<20 {
		return 0, nil, errors.New("frame too large")
	}
	var mask [4]byte
	if head[1]&0x80 != 0 {
		if _, err := io.ReadFull(r, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	payload := make([]byte, length)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	if head[1]&0x80 != 0 {
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
	}
	return opcode, payload, nil
}

// writeFrame writes one unmasked server frame and flushes it.
func writeFrame(w *bufio.Writer, opcode byte, payload []byte) error {
	_ = w.WriteByte(0x80 | opcode)
	switch n := len(payload); {
	case n < 126:
		_ = w.WriteByte(byte(n))
	case n <= 0xffff:
		_ = w.WriteByte(126)
		_ = binary.Write(w, binary.BigEndian, uint16(n))
	default:
		_ = w.WriteByte(127)
		_ = binary.Write(w, binary.BigEndian, uint64(n))
	}
	_, _ = w.Write(payload)
	return w.Flush()
}

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// ballast is the memory $BALLAST_MB asks for, kept reachable so it stays resident.
var ballast []byte

func fillBallast(mib int) {
	ballast = make([]byte, mib<<20)
	text := []byte("agent state: a conversation, tool results, a plan. ")
	x := uint64(88172645463325252)
	for page := 0; page < len(ballast); page += 4096 {
		for i := page; i < page+2048; i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			binary.LittleEndian.PutUint64(ballast[i:], x)
		}
		for i := page + 2048; i < page+4096; i++ {
			ballast[i] = text[i%len(text)]
		}
	}
}

func main() {
	if mib, err := strconv.Atoi(os.Getenv("BALLAST_MB")); err == nil && mib > 0 {
		fillBallast(mib)
	}
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
	mux.HandleFunc("/ws", s.ws)
	mux.HandleFunc("/local/", s.local)
	mux.HandleFunc("/fetch", s.fetch)
	told := &notices{}
	mux.HandleFunc("/restored", told.restored)
	mux.HandleFunc("/random", random)
	srv := &http.Server{
		Addr:              "0.0.0.0:" + port,
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       time.Second,
	}
	log.Printf("counter: listening on %s, data dir %s", srv.Addr, s.dataDir)
	log.Fatal(srv.ListenAndServe())
}

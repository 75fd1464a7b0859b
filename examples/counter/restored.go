package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// notices keeps what ate's post_restore hook told this process (the template's
// lifecycle.postRestore.httpPost: POST /restored, a JSON notice), newest last, so a test can see
// each restore the process lived through.
type notices struct {
	mu   sync.Mutex
	seen []json.RawMessage
}

// restored records a POST's JSON body and answers 204; a GET answers {"notices": [...]}.
func (n *notices) restored(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil || !json.Valid(body) {
			http.Error(w, "a JSON notice expected", http.StatusBadRequest)
			return
		}
		n.seen = append(n.seen, json.RawMessage(body))
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	seen := n.seen
	if seen == nil {
		seen = []json.RawMessage{}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"notices": seen})
}

// random answers {"random": "<32 hex digits>"}: 16 bytes the kernel's random source gives now,
// to show whether copies of one snapshot draw the same randomness.
func random(w http.ResponseWriter, _ *http.Request) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"random": hex.EncodeToString(b[:])})
}

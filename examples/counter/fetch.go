package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// fetchRequest is what POST /fetch asks the actor to fetch from inside its sandbox.
type fetchRequest struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
	// Direct ignores the proxy settings ($HTTPS_PROXY...), as software that does not read them.
	Direct bool `json:"direct"`
	// Dial connects to this host:port whatever the URL's host (the sandbox has no DNS).
	Dial string `json:"dial"`
	// CAPEM is trusted beside the system's roots ($SSL_CERT_FILE).
	CAPEM          string  `json:"ca_pem"`
	TimeoutSeconds float64 `json:"timeout_seconds"`
}

// fetch makes one outbound request (POST /fetch {"url", "method", "headers", "direct", "dial",
// "ca_pem", "timeout_seconds"}) and answers {"status", "headers", "body", "error", "elapsed_ms"}:
// an actor calling out through ate's egress proxy, or around it. Keep-alives are off.
func (s *server) fetch(w http.ResponseWriter, r *http.Request) {
	var in fetchRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil || in.URL == "" {
		http.Error(w, "POST a JSON body with at least url", http.StatusBadRequest)
		return
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if in.CAPEM != "" {
		roots.AppendCertsFromPEM([]byte(in.CAPEM))
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	transport := &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			if in.Dial != "" {
				address = in.Dial
			}
			return dialer.DialContext(ctx, network, address)
		},
	}
	if in.Direct {
		transport.Proxy = nil
	}
	timeout := 10 * time.Second
	if in.TimeoutSeconds > 0 {
		timeout = time.Duration(in.TimeoutSeconds * float64(time.Second))
	}
	method := in.Method
	if method == "" {
		method = http.MethodGet
	}
	out := map[string]any{}
	request, err := http.NewRequestWithContext(r.Context(), method, in.URL, nil)
	if err == nil {
		for k, v := range in.Headers {
			request.Header.Set(k, v)
		}
		client := &http.Client{Timeout: timeout, Transport: transport}
		started := time.Now()
		var answer *http.Response
		answer, err = client.Do(request)
		out["elapsed_ms"] = float64(time.Since(started).Microseconds()) / 1000
		if err == nil {
			defer answer.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(answer.Body, 1<<20))
			headers := map[string]string{}
			for k, v := range answer.Header {
				headers[strings.ToLower(k)] = strings.Join(v, ", ")
			}
			out["status"], out["headers"], out["body"] = answer.StatusCode, headers, string(body)
		}
	}
	if err != nil {
		out["error"] = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

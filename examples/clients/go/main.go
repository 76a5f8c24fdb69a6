// Sends one signed request to webhookd's API, with Go's standard library.
//
//	export WEBHOOKD_URL=http://127.0.0.1:8080 WEBHOOKD_KEY_ID=whk_... WEBHOOKD_SECRET=whs_...
//	go run . GET /v1/endpoints
//	go run . POST /v1/events '{"event_name":"order.created","payload":{"order":42}}'
//
// Prints the reply and exits 1 unless it is HTTP 200. The signature (docs/API.md,
// "Authentication"): lowercase hex HMAC-SHA256 keyed with the key's secret (UTF-8) over
// X-Timestamp + "\n" + payload, where payload is the body as sent, or for a request without a
// body METHOD + " " + path-and-query.
package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: go run . METHOD PATH [JSON-BODY]")
		os.Exit(2)
	}
	method, path := strings.ToUpper(os.Args[1]), os.Args[2]
	body := ""
	if len(os.Args) > 3 {
		body = os.Args[3]
	}
	base := strings.TrimRight(os.Getenv("WEBHOOKD_URL"), "/")
	if base == "" {
		base = "http://127.0.0.1:8080"
	}

	// Milliseconds: two requests in the same second still get different signatures (each
	// signature is accepted once).
	timestamp := strconv.FormatInt(time.Now().UnixMilli(), 10)
	payload := body
	if payload == "" {
		payload = method + " " + path
	}
	h := hmac.New(sha256.New, []byte(os.Getenv("WEBHOOKD_SECRET")))
	h.Write([]byte(timestamp + "\n" + payload))

	req, err := http.NewRequest(method, base+path, bytes.NewBufferString(body))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	req.Header.Set("X-Key-ID", os.Getenv("WEBHOOKD_KEY_ID"))
	req.Header.Set("X-Timestamp", timestamp)
	req.Header.Set("X-Signature", hex.EncodeToString(h.Sum(nil)))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	reply, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer reply.Body.Close()
	text, _ := io.ReadAll(reply.Body)
	fmt.Printf("HTTP %d\n%s\n", reply.StatusCode, text)
	if reply.StatusCode != http.StatusOK {
		os.Exit(1)
	}
}

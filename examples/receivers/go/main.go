// A webhook receiver that verifies webhookd's two signatures, with Go's standard library.
//
//	go run . --port 9000 --secret 'whsec_...'
//
// It prints each delivery and answers 204, or 401 when a signature does not verify or the
// timestamp is more than --tolerance seconds from this clock. docs/API.md ("Signatures on
// deliveries") says what each header covers:
//   - X-Service-Signature: hex HMAC-SHA256 keyed with the secret's UTF-8 bytes AS WRITTEN (a
//     whsec_ prefix included) over X-Service-Timestamp + "\n" + body.
//   - webhook-signature (Standard Webhooks): "v1," + base64 HMAC-SHA256 keyed with the
//     base64-decoded part after whsec_ (or the secret's UTF-8 bytes without that prefix) over
//     webhook-id + "." + webhook-timestamp + "." + body.
//
// During a secret rotation each header carries two signatures (hex ones separated by ",",
// v1 ones by " "); one made with your secret is enough.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func mac(key []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// verify returns nil when the delivery verifies, else the reason it does not.
func verify(secret string, header http.Header, body []byte, tolerance int64, now int64) error {
	timestamp := header.Get("X-Service-Timestamp")
	sent, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || sent < 0 {
		return errors.New("no X-Service-Timestamp in Unix seconds")
	}
	if diff := now - sent; diff > tolerance || -diff > tolerance {
		return fmt.Errorf("X-Service-Timestamp %s is more than %d s from this clock", timestamp, tolerance)
	}
	if header.Get("webhook-timestamp") != timestamp {
		return errors.New("webhook-timestamp is missing or differs from X-Service-Timestamp")
	}

	// X-Service-Signature: keyed with the secret exactly as written.
	expectedHex := mac([]byte(secret), []byte(timestamp+"\n"), body)
	hexOK := false
	for _, s := range strings.Split(header.Get("X-Service-Signature"), ",") {
		if sent, err := hex.DecodeString(strings.TrimSpace(s)); err == nil && hmac.Equal(sent, expectedHex) {
			hexOK = true
		}
	}
	if !hexOK {
		return errors.New("X-Service-Signature does not verify")
	}

	// webhook-signature: keyed with the decoded bytes of a whsec_ secret.
	key := []byte(secret)
	if strings.HasPrefix(secret, "whsec_") {
		decoded, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			return errors.New("the secret's part after whsec_ is not base64")
		}
		key = decoded
	}
	expectedV1 := "v1," + base64.StdEncoding.EncodeToString(
		mac(key, []byte(header.Get("webhook-id")+"."+timestamp+"."), body))
	for _, s := range strings.Split(header.Get("webhook-signature"), " ") {
		if hmac.Equal([]byte(s), []byte(expectedV1)) {
			return nil
		}
	}
	return errors.New("webhook-signature does not verify")
}

func main() {
	port := flag.Int("port", 9000, "port to listen on (0: any free port)")
	secret := flag.String("secret", "", "the endpoint's signing secret")
	tolerance := flag.Int64("tolerance", 300, "seconds of clock difference accepted")
	flag.Parse()
	if *secret == "" {
		fmt.Fprintln(os.Stderr, "usage: go run . --port 9000 --secret 'whsec_...'")
		os.Exit(2)
	}

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		verdict, status := "verified", http.StatusNoContent
		if err := verify(*secret, r.Header, body, *tolerance, time.Now().Unix()); err != nil {
			verdict, status = "REFUSED: "+err.Error(), http.StatusUnauthorized
		}
		fmt.Printf("%s %s webhook-id=%s attempt=%s: %s\n  %s\n", r.Method, r.URL.RequestURI(),
			r.Header.Get("webhook-id"), r.Header.Get("X-Service-Attempt"), verdict, body)
		w.WriteHeader(status)
	})

	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s/\n", listener.Addr())
	log.Fatal(http.Serve(listener, handler))
}

package deliver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestClassifyStatus(t *testing.T) {
	cases := map[Class][]int{
		Accepted:  {200, 201, 202, 204, 299},
		Transient: {408, 429, 500, 501, 502, 503, 504, 599},
		Permanent: {400, 401, 403, 404, 405, 409, 410, 413, 415, 422, 451, 499, 100, 301, 302, 304, 307, 308, 600},
	}
	for want, codes := range cases {
		for _, c := range codes {
			if got := ClassifyStatus(c); got != want {
				t.Errorf("ClassifyStatus(%d) = %s, want %s", c, got, want)
			}
		}
	}
}

// TestClassifyOverHTTP classifies real answers of a real HTTP server,
// timeouts and refused connections through the webhook sink.
func TestClassifyOverHTTP(t *testing.T) {
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so the server notices a client that gives up
		if r.Method != http.MethodPost {
			gets.Add(1)
			w.WriteHeader(http.StatusOK) // a redirect followed as GET would look accepted
			return
		}
		switch r.URL.Path {
		case "/slow":
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
			return
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		case "/retry-after":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		code, _ := strconv.Atoi(r.URL.Path[1:])
		w.WriteHeader(code)
		w.Write([]byte("answer body"))
	}))
	defer srv.Close()
	refused := refusedURL(t)

	send := func(url string, timeout time.Duration) error {
		sinks, err := NewSinks([]SinkConfig{{Type: TypeWebhook, Name: "w", URL: url, Timeout: timeout}}, SinkOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sinks[0].Send(context.Background(), testDelivery(t, "a1", 0))
	}
	for _, tc := range []struct {
		path      string
		class     Class
		status    int
		permanent bool
	}{
		{"/200", Accepted, 0, false},
		{"/204", Accepted, 0, false},
		{"/400", Permanent, 400, true},
		{"/404", Permanent, 404, true},
		{"/422", Permanent, 422, true},
		{"/408", Transient, 408, false},
		{"/429", Transient, 429, false},
		{"/500", Transient, 500, false},
		{"/503", Transient, 503, false},
		{"/redirect", Permanent, 302, true},
	} {
		err := send(srv.URL+tc.path, 5*time.Second)
		if tc.class == Accepted {
			if err != nil {
				t.Errorf("%s: %v, want accepted", tc.path, err)
			}
			continue
		}
		var se *SendError
		if !errors.As(err, &se) {
			t.Fatalf("%s: error %v is not a *SendError", tc.path, err)
		}
		if se.Class != tc.class || se.Status != tc.status || IsPermanent(err) != tc.permanent {
			t.Errorf("%s: class %s status %d permanent %v, want %s %d %v", tc.path, se.Class, se.Status, IsPermanent(err), tc.class, tc.status, tc.permanent)
		}
		if tc.status >= 400 && se.Body != "answer body" {
			t.Errorf("%s: body %q, want the answer's body", tc.path, se.Body)
		}
	}
	if n := gets.Load(); n != 0 {
		t.Errorf("a redirect was followed (%d GETs): it must be reported, not followed", n)
	}
	// Retry-After is carried for the retry loop.
	var se *SendError
	if err := send(srv.URL+"/retry-after", 5*time.Second); !errors.As(err, &se) || se.RetryAfter != 7*time.Second || se.Class != Transient {
		t.Errorf("retry-after: %v (%+v), want transient with RetryAfter 7s", err, se)
	}
	// Timeouts are transient.
	start := time.Now()
	err := send(srv.URL+"/slow", 100*time.Millisecond)
	if !errors.As(err, &se) || se.Class != Transient || se.Status != 0 || !IsTimeout(err) || IsPermanent(err) {
		t.Errorf("slow receiver: %v, want a transient timeout without status", err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("the 100ms timeout took %s", took)
	}
	// Refused connections are transient.
	err = send(refused, time.Second)
	if !errors.As(err, &se) || se.Class != Transient || se.Status != 0 || IsTimeout(err) {
		t.Errorf("refused: %v, want transient, no status, not a timeout", err)
	}
}

// refusedURL returns an http URL on 127.0.0.1 where nothing listens.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/hook"
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := func() time.Time { return now }
	for v, want := range map[string]time.Duration{
		"": 0, "3": 3 * time.Second, "0": 0, "-1": 0, "soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
	} {
		if got := retryAfter(v, clk); got != want {
			t.Errorf("retryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}

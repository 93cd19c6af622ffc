package deliver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Sink is one receiver of alert revisions.
type Sink interface {
	// Name is the sink's configured name (metrics, logs, DLQ header).
	Name() string
	// Send delivers one revision. nil means the receiver accepted it;
	// otherwise the error is a *SendError classified Transient or
	// Permanent. Send bounds itself by the sink's timeout.
	Send(ctx context.Context, d Delivery) error
}

// SinkOptions are the injected dependencies of the sinks.
type SinkOptions struct {
	// Client sends the requests. Default: a client of its own with the
	// default transport settings. Redirects are never followed (a copy of
	// the client is used with CheckRedirect set).
	Client *http.Client
	// Now is the clock (Alertmanager endsAt). Default time.Now.
	Now func() time.Time
	// LookupEnv and ReadFile read webhook secrets. Defaults os.LookupEnv
	// and os.ReadFile.
	LookupEnv func(string) (string, bool)
	ReadFile  func(string) ([]byte, error)
}

func (o *SinkOptions) ensureDefaults() {
	if o.Client == nil {
		o.Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	c := *o.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	o.Client = &c
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
}

// NewSinks builds the configured sinks, in configuration order, reading
// webhook secrets. Errors name the sink and the secret's source, never the
// secret.
func NewSinks(cfgs []SinkConfig, o SinkOptions) ([]Sink, error) {
	o.ensureDefaults()
	sinks := make([]Sink, 0, len(cfgs))
	for i, c := range cfgs {
		if c.Timeout <= 0 {
			c.Timeout = DefaultSinkTimeout
		}
		switch c.Type {
		case TypeWebhook:
			secret, err := loadSecret(c, o)
			if err != nil {
				return nil, fmt.Errorf("deliver: delivery.sinks[%d] (%s): %w", i, c.Name, err)
			}
			sinks = append(sinks, &Webhook{name: c.Name, url: c.URL, timeout: c.Timeout, secret: secret, client: o.Client, now: o.Now})
		case TypeAlertmanager:
			sinks = append(sinks, &Alertmanager{
				name: c.Name, url: strings.TrimRight(c.URL, "/") + "/api/v2/alerts", timeout: c.Timeout,
				labels: c.Labels, resolveTimeout: c.ResolveTimeout, now: o.Now, client: o.Client,
			})
		default:
			return nil, fmt.Errorf("deliver: delivery.sinks[%d].type = %q is invalid: one of \"webhook\", \"alertmanager\"", i, c.Type)
		}
	}
	return sinks, nil
}

func loadSecret(c SinkConfig, o SinkOptions) ([]byte, error) {
	switch {
	case c.SecretEnv != "":
		v, ok := o.LookupEnv(c.SecretEnv)
		if !ok || v == "" {
			return nil, fmt.Errorf("secret_env: environment variable %s is unset or empty", c.SecretEnv)
		}
		return []byte(v), nil
	case c.SecretFile != "":
		b, err := o.ReadFile(c.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("secret_file: %w", err)
		}
		b = bytes.TrimRight(b, "\r\n")
		if len(b) == 0 {
			return nil, fmt.Errorf("secret_file: %s is empty", c.SecretFile)
		}
		return b, nil
	}
	return nil, nil
}

// maxBodySnippet bounds the response body kept for the DLQ detail.
const maxBodySnippet = 256

// post sends one POST and classifies the answer.
func post(ctx context.Context, client *http.Client, now func() time.Time, sink, url string, timeout time.Duration, hdr http.Header, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return &SendError{Sink: sink, Class: Permanent, Err: fmt.Errorf("build request: %w", err)}
	}
	req.Header = hdr
	resp, err := client.Do(req)
	if err != nil {
		if IsTimeout(err) {
			err = fmt.Errorf("timeout after %s: %w", timeout, err)
		}
		return &SendError{Sink: sink, Class: Transient, Err: err}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxBodySnippet))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection can be reused
	class := ClassifyStatus(resp.StatusCode)
	if class == Accepted {
		return nil
	}
	return &SendError{
		Sink: sink, Status: resp.StatusCode, Class: class,
		RetryAfter: retryAfter(resp.Header.Get("Retry-After"), now),
		Body:       strings.TrimSpace(strings.ToValidUTF8(string(snippet), "?")),
	}
}

// retryAfter parses a Retry-After header (seconds or an HTTP date); 0 when
// absent or invalid.
func retryAfter(v string, now func() time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now()); d > 0 {
			return d
		}
	}
	return 0
}

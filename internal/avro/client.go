package avro

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of ClientOptions, in one place.
const (
	// DefaultTimeout bounds one registry request: 5 seconds.
	DefaultTimeout = 5 * time.Second
	// maxResponseBytes bounds a registry answer that is read: 8 MiB.
	maxResponseBytes = 8 << 20
	// contentType is the Confluent API's media type.
	contentType = "application/vnd.schemaregistry.v1+json"
)

// ClientOptions configure a Client. URL is required; every other field has
// a default.
type ClientOptions struct {
	// URL is the base URL of the Confluent-compatible API, the part before
	// /schemas and /subjects: "http://registry:8081" for Confluent's and
	// Karapace, "http://registry:8080/apis/ccompat/v7" for Apicurio 3.
	// http and https only; credentials in the URL are refused (use
	// Username and Password).
	URL string
	// Username and Password enable HTTP basic authentication when Username
	// is not empty. Default: none.
	Username, Password string
	// Timeout bounds each request, connection included. Default
	// DefaultTimeout (5s); zero or negative means the default.
	Timeout time.Duration
	// HTTPClient sends the requests. Default: a client of its own with
	// Timeout and a dial timeout of Timeout (never http.DefaultClient).
	HTTPClient *http.Client
	// Metrics records requests by outcome. Default nil: none.
	Metrics *Metrics
}

// EnsureDefaults fills every unset field with its default and returns o.
func (o *ClientOptions) EnsureDefaults() *ClientOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext
		tr.TLSHandshakeTimeout = o.Timeout
		tr.ResponseHeaderTimeout = o.Timeout
		tr.MaxIdleConnsPerHost = 4
		o.HTTPClient = &http.Client{Transport: tr, Timeout: o.Timeout}
	}
	return o
}

// Client speaks the Confluent Schema Registry REST API (the subset this
// package needs: GET /schemas/ids/{id}, POST /subjects/{subject}/versions).
// It keeps no cache (see Registry) and is safe for concurrent use.
//
// Every error it returns wraps ErrSchemaNotFound (the id does not exist),
// ErrRegistryUnavailable (no usable answer: retry later) or neither (the
// registry refused the request for good, e.g. an incompatible schema on
// register); HTTP answers are also an *APIError.
type Client struct {
	base string // URL without a trailing slash
	opts ClientOptions
}

// NewClient checks o and returns a Client.
func NewClient(o ClientOptions) (*Client, error) {
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("avro: registry url %q: %w", o.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("avro: registry url %q: want http://host[:port][/path] or https://...", o.URL)
	}
	if u.User != nil {
		return nil, fmt.Errorf("avro: registry url %q: credentials in the URL are not accepted, use the username and password settings", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("avro: registry url %q: want no query or fragment", o.URL)
	}
	o.EnsureDefaults()
	return &Client{base: strings.TrimRight(u.String(), "/"), opts: o}, nil
}

// URL returns the base URL of the API.
func (c *Client) URL() string { return c.base }

// Close releases idle connections. It is idempotent; the Client stays
// usable.
func (c *Client) Close() { c.opts.HTTPClient.CloseIdleConnections() }

// SchemaByID fetches the schema with the given global id: its text and its
// type ("AVRO", "JSON", "PROTOBUF"; the API omits it for Avro and so
// SchemaByID returns "AVRO" then).
func (c *Client) SchemaByID(ctx context.Context, id uint32) (schema, schemaType string, err error) {
	op := fmt.Sprintf("get schema id %d", id)
	var out struct {
		Schema     *string `json:"schema"`
		SchemaType string  `json:"schemaType"`
	}
	if err := c.do(ctx, OpGetSchema, op, http.MethodGet, "/schemas/ids/"+strconv.FormatUint(uint64(id), 10), nil, &out); err != nil {
		return "", "", err
	}
	if out.Schema == nil {
		return "", "", newClassified(ErrRegistryUnavailable, op, fmt.Sprintf("registry unavailable: answer without a schema member (is %s a Confluent-compatible API?)", c.base), nil)
	}
	if out.SchemaType == "" {
		out.SchemaType = "AVRO"
	}
	return *out.Schema, out.SchemaType, nil
}

// Register registers an Avro schema under subject (POST
// /subjects/{subject}/versions) and returns its global id. Registering a
// schema that the subject already has returns the existing id. A schema the
// subject's compatibility rule refuses is an *APIError with status 409 that
// is neither transient nor ErrSchemaNotFound.
func (c *Client) Register(ctx context.Context, subject, schema string) (uint32, error) {
	op := fmt.Sprintf("register subject %s", subject)
	body, err := json.Marshal(struct {
		Schema string `json:"schema"`
	}{schema})
	if err != nil {
		return 0, fmt.Errorf("avro: %s: %w", op, err)
	}
	var out struct {
		ID *int64 `json:"id"`
	}
	if err := c.do(ctx, OpRegister, op, http.MethodPost, "/subjects/"+url.PathEscape(subject)+"/versions", body, &out); err != nil {
		return 0, err
	}
	if out.ID == nil || *out.ID < 0 || *out.ID > MaxSchemaID {
		return 0, newClassified(ErrRegistryUnavailable, op, fmt.Sprintf("registry unavailable: answer without a valid id (is %s a Confluent-compatible API?)", c.base), nil)
	}
	return uint32(*out.ID), nil
}

// do sends one request and decodes a 2xx JSON answer into out. It
// classifies every failure (see Client).
// CheckBase asks the registry for its subjects (GET /subjects, which every
// Confluent-compatible registry serves) and returns an error only when the
// answer is 404: the base URL is not a registry API's (a wrong prefix),
// which would otherwise make every lookup by id "not found" and every
// record a dead letter. Anything else (unreachable, 5xx, credentials) is
// left to the requests that need the registry, which wait and retry.
func (c *Client) CheckBase(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/subjects", nil)
	if err != nil {
		return fmt.Errorf("avro: registry.url %s: %w", c.base, err)
	}
	req.Header.Set("Accept", contentType+", application/json")
	if c.opts.Username != "" {
		req.SetBasicAuth(c.opts.Username, c.opts.Password)
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return nil // unreachable now: the lookups wait for it
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("avro: registry.url %s is not the base URL of a schema registry API: GET %s/subjects answered 404 (Confluent and Karapace serve it at their root, Apicurio at .../apis/ccompat/v7)", c.base, c.base)
	}
	return nil
}

func (c *Client) do(ctx context.Context, metricOp, op, method, path string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("avro: %s: %w", op, err)
	}
	req.Header.Set("Accept", contentType+", application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if c.opts.Username != "" {
		req.SetBasicAuth(c.opts.Username, c.opts.Password)
	}
	start := time.Now()
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		c.opts.Metrics.request(metricOp, OutcomeUnavailable, time.Since(start))
		return newClassified(ErrRegistryUnavailable, op, "registry unavailable", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err == nil && len(b) > maxResponseBytes {
		err = fmt.Errorf("answer larger than %d bytes", maxResponseBytes)
	}
	if err != nil {
		c.opts.Metrics.request(metricOp, OutcomeUnavailable, time.Since(start))
		return newClassified(ErrRegistryUnavailable, op, "registry unavailable: read answer", err)
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			c.opts.Metrics.request(metricOp, OutcomeUnavailable, time.Since(start))
			return newClassified(ErrRegistryUnavailable, op, fmt.Sprintf(
				"registry unavailable: HTTP %d with a body that is not the Confluent API's JSON (is %s the API's base URL?)", resp.StatusCode, c.base), err)
		}
		c.opts.Metrics.request(metricOp, OutcomeOK, time.Since(start))
		return nil
	}
	apiErr := &APIError{Op: op, Status: resp.StatusCode}
	var eb struct {
		Code    *int   `json:"error_code"`
		Message string `json:"message"`
	}
	confluent := json.Unmarshal(b, &eb) == nil && eb.Code != nil
	if confluent {
		apiErr.Code, apiErr.Message = *eb.Code, clean(eb.Message)
	} else {
		apiErr.Message = clean(string(b[:min(len(b), 120)]))
	}
	outcome, class := classify(metricOp, resp.StatusCode, apiErr.Code, confluent)
	c.opts.Metrics.request(metricOp, outcome, time.Since(start))
	switch {
	case class == nil:
		return fmt.Errorf("avro: %s: %w", op, apiErr)
	case class == ErrSchemaNotFound:
		return newClassified(class, op, "schema not found", apiErr)
	case !confluent && resp.StatusCode == http.StatusNotFound:
		return newClassified(class, op, fmt.Sprintf(
			"registry unavailable: HTTP 404 without a Confluent error body (is %s the API's base URL, e.g. .../apis/ccompat/v7 for Apicurio?)", c.base), apiErr)
	}
	return newClassified(class, op, "registry unavailable", apiErr)
}

// codeSchemaNotFound is the Confluent error_code of an unknown schema id.
const codeSchemaNotFound = 40403

// classify maps a non-2xx answer to its outcome and sentinel (nil: a
// permanent refusal that is neither).
//
//   - 404 with error_code 40403 (and, for a lookup by id, 400/404/422 with
//     any Confluent error body: the registry judged that id; Apicurio 2's
//     ccompat answers an unknown id with error_code 404) is not found. A
//     Confluent registry answers an unknown path with error_code 404 too:
//     a wrong base URL is caught at start-up instead (CheckBase).
//   - 408, 429, 5xx, 401/403 (credentials: an operator must act, records
//     wait) and any answer without a Confluent error body (a wrong URL, a
//     proxy) are transient.
//   - Anything else (409 incompatible, 422 invalid schema on register) is a
//     permanent refusal.
func classify(op string, status, code int, confluent bool) (string, error) {
	switch {
	case status == http.StatusNotFound && code == codeSchemaNotFound:
		return OutcomeNotFound, ErrSchemaNotFound
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status >= 500,
		status == http.StatusUnauthorized, status == http.StatusForbidden, !confluent:
		return OutcomeUnavailable, ErrRegistryUnavailable
	case op == OpGetSchema && (status == http.StatusNotFound || status == http.StatusBadRequest || status == http.StatusUnprocessableEntity):
		return OutcomeNotFound, ErrSchemaNotFound
	}
	return OutcomeRejected, nil
}

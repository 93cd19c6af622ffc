package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/deliver"
	"github.com/vibeline/processor/internal/metrics"
)

func deliverCmd() *cobra.Command {
	var (
		cfgPath, logLevel string
		check             bool
	)
	cmd := &cobra.Command{
		Use:   "deliver",
		Short: "Deliver alert revisions to webhooks and Alertmanager, at least once, with idempotency keys",
		Long: `deliver joins its own consumer group (delivery.group_id), reads the alerts topic
read_committed and hands every alert revision, in order per machine, to the
sinks of the delivery: section of --config (webhook, alertmanager). Offsets
are committed only after every sink accepted a revision or it was written to
the delivery DLQ topic; every delivery carries Idempotency-Key:
<alert_id>-<revision>. Retries back off exponentially with jitter up to
delivery.retry; a circuit breaker per sink holds deliveries while a receiver
is down. See docs/DELIVERY.md.

Alert values are JSON, or Avro with alerts_format: avro (the Confluent wire
format; writer schemas from the schema registry at registry.url). Webhooks
always receive the alert JSON. See docs/AVRO.md.

Environment overrides: PROCESSOR_DELIVERY_<KEY> for the scalar keys
(delivery.retry.max_attempts is PROCESSOR_DELIVERY_RETRY_MAX_ATTEMPTS),
PROCESSOR_ALERTS_FORMAT and PROCESSOR_REGISTRY_<KEY>.
Exit codes: 0 clean stop, 1 failure, 2 invalid configuration.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadDeliveryConfig(cfgPath)
			if err != nil {
				return usageError{err}
			}
			format, err := loadDeliveryFormat(cfgPath)
			if err != nil {
				return usageError{err}
			}
			sinks, err := deliver.NewSinks(cfg.Sinks, deliver.SinkOptions{})
			if err != nil {
				return usageError{err}
			}
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "%+v\n", cfg.Redacted()) // secrets are never in cfg, only their sources; URL passwords are masked
				fmt.Fprintln(cmd.OutOrStdout(), format)                 // never the registry password
				return nil
			}
			sec, err := loadKafkaSecurity(cfgPath)
			if err != nil {
				return usageError{err}
			}
			logger := newLogger(os.Stderr, logLevel)
			extra, err := kafkaSecurityOpts(sec, logger)
			if err != nil {
				return err
			}
			return runDelivery(cmd.Context(), cfg, format, sinks, logger, extra)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file with a delivery: section")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().BoolVar(&check, "check", false, "validate the configuration, print it with defaults filled in, and exit")
	return cmd
}

// loadDeliveryConfig reads the delivery: section of the YAML file at path
// (optional; "" for none) over deliver.Default(), with PROCESSOR_DELIVERY_*
// environment overrides of scalar keys. The processor's top-level brokers
// and topics.alerts are the defaults of delivery.brokers and
// delivery.topics.alerts. Unknown keys in the section are errors; the rest
// of the file belongs to the processor and is not read. The result has its
// defaults filled in and is validated.
func loadDeliveryConfig(path string) (deliver.Config, error) {
	v := viper.New()
	v.SetEnvPrefix(config.EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return deliver.Config{}, fmt.Errorf("deliver: read %s: %w", path, err)
		}
	}
	for _, k := range scalarKeys(reflect.TypeOf(deliver.Config{}), "delivery") {
		if err := v.BindEnv(k); err != nil {
			return deliver.Config{}, fmt.Errorf("deliver: bind env %s: %w", k, err)
		}
	}
	cfg := deliver.Default()
	if v.IsSet("brokers") {
		cfg.Brokers = v.GetStringSlice("brokers")
	}
	if v.IsSet("topics.alerts") {
		cfg.Topics.Alerts = v.GetString("topics.alerts")
	}
	raw := map[string]any{}
	switch sec := v.Get("delivery").(type) {
	case nil:
	case map[string]any:
		raw = sec
	default:
		return deliver.Config{}, fmt.Errorf("deliver: delivery = %v is invalid: a mapping of delivery keys", sec)
	}
	// Environment overrides of scalar keys (v.Get prefers them to the file).
	for _, k := range scalarKeys(reflect.TypeOf(deliver.Config{}), "delivery") {
		if v.IsSet(k) {
			setPath(raw, strings.Split(k, ".")[1:], v.Get(k))
		}
	}
	if _, set := raw["brokers"]; set {
		cfg.Brokers = nil // replace the default list, do not merge into it
	}
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:           &cfg,
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		),
	})
	if err != nil {
		return deliver.Config{}, fmt.Errorf("deliver: %w", err)
	}
	if err := dec.Decode(raw); err != nil {
		return deliver.Config{}, fmt.Errorf("deliver: %s", decodeErrRe.ReplaceAllStringFunc(err.Error(), func(m string) string {
			where := decodeErrRe.FindStringSubmatch(m)[1]
			if where == "deliver.Config" {
				return "delivery"
			}
			return "delivery." + where
		}))
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return deliver.Config{}, err
	}
	return cfg, nil
}

// decodeErrRe matches the "'<where>'" of mapstructure's messages ("'retry'
// has invalid keys: maxx"), rewritten to name the configuration key.
var decodeErrRe = regexp.MustCompile(`(?m)^'([^']*)'`)

// setPath sets m[path[0]][path[1]]... = val, creating maps on the way; a
// path through a non-map value is left alone (decoding reports it).
func setPath(m map[string]any, path []string, val any) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p]
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		nm, ok := next.(map[string]any)
		if !ok {
			return
		}
		m = nm
	}
	m[path[len(path)-1]] = val
}

// scalarKeys lists the dotted keys of the non-list, non-map fields of a
// config struct type (environment overrides apply to those).
func scalarKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" {
			continue
		}
		key := prefix + "." + tag
		switch {
		case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)):
			keys = append(keys, scalarKeys(f.Type, key)...)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct, f.Type.Kind() == reflect.Map:
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// deliveryFormat is how processor deliver reads alert values: the
// processor's alerts_format and, for avro, its schema registry (registry.*).
type deliveryFormat struct {
	AlertsFormat string
	Registry     config.Registry
}

// String describes the format for --check, never the registry password.
func (f deliveryFormat) String() string {
	if f.AlertsFormat != config.FormatAvro {
		return "alerts: json"
	}
	r := f.Registry
	auth := "no authentication"
	if r.Username != "" {
		auth = fmt.Sprintf("basic authentication as %q", r.Username)
	}
	return fmt.Sprintf("alerts: avro (Confluent wire format, schemas/alert.avsc); schema registry %s, %s, timeout %s, not_found_ttl %s",
		r.URL, auth, r.Timeout, r.NotFoundTTL)
}

// loadDeliveryFormat reads the processor's top-level alerts_format and
// registry.* keys of the YAML file at path ("" for none) over the
// processor's defaults, with PROCESSOR_ALERTS_FORMAT and
// PROCESSOR_REGISTRY_* environment overrides, and validates them as the
// processor does (internal/config). alerts_format avro needs registry.url.
// Unknown keys in the registry: section are errors; the rest of the file is
// not read here.
func loadDeliveryFormat(path string) (deliveryFormat, error) {
	v, err := readProcessorKeys(path, func(key string) bool {
		return key == "alerts_format" || strings.HasPrefix(key, "registry.")
	})
	if err != nil {
		return deliveryFormat{}, err
	}
	var c struct {
		Registry     config.Registry `mapstructure:"registry"`
		AlertsFormat string          `mapstructure:"alerts_format"`
		Rest         map[string]any  `mapstructure:",remain"` // the processor's and delivery's keys
	}
	if err := v.UnmarshalExact(&c); err != nil {
		return deliveryFormat{}, fmt.Errorf("config: %w", err)
	}
	f := deliveryFormat{AlertsFormat: c.AlertsFormat, Registry: c.Registry}
	// Validate as the processor does: its defaults with these keys.
	probe := config.Default()
	probe.InstanceID = "processor-deliver" // not the host name: only the keys read here are judged
	probe.Registry, probe.AlertsFormat = f.Registry, f.AlertsFormat
	var errs []error
	if f.AlertsFormat == config.FormatAvro && f.Registry.URL == "" {
		errs = append(errs, fmt.Errorf("config: alerts_format = %q needs registry.url: processor deliver reads the writer schemas of Avro alerts "+
			"from the schema registry the processor registers them in; set registry.url to its base URL, http(s)://host[:port][/path] "+
			"(PROCESSOR_REGISTRY_URL), or use alerts_format \"json\"", f.AlertsFormat))
		probe.AlertsFormat = config.FormatJSON // reported above
	}
	if err := probe.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return deliveryFormat{}, err
	}
	return f, nil
}

// deliveryDecoder returns the decoder of Avro alerts (nil for JSON): a
// registry client and cache whose collectors go on reg, and a close
// function for the client's idle connections.
func deliveryDecoder(ctx context.Context, f deliveryFormat, reg prometheus.Registerer, logger *slog.Logger) (deliver.DecodeFunc, func(), error) {
	if f.AlertsFormat != config.FormatAvro {
		return nil, func() {}, nil
	}
	r := f.Registry
	am, err := avro.NewMetrics(reg)
	if err != nil {
		return nil, nil, fmt.Errorf("deliver: %w", err)
	}
	client, err := avro.NewClient(avro.ClientOptions{
		URL: r.URL, Username: r.Username, Password: r.Password.Reveal(), Timeout: r.Timeout, Metrics: am,
	})
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("deliver: registry.url: %w", err)}
	}
	cache, err := avro.NewRegistry(avro.RegistryOptions{Client: client, NotFoundTTL: r.NotFoundTTL, Logger: logger, Metrics: am})
	if err != nil {
		return nil, nil, fmt.Errorf("deliver: %w", err)
	}
	dec, err := deliver.NewAvroDecoder(cache)
	if err != nil {
		return nil, nil, err
	}
	if err := client.CheckBase(ctx); err != nil {
		return nil, nil, err
	}
	logger.Info("deliver: alerts are Avro", "registry", client.URL())
	return dec, client.Close, nil
}

// runDelivery wires registry, metrics server and delivery stage, and runs
// them until ctx ends or one fails.
func runDelivery(ctx context.Context, cfg deliver.Config, format deliveryFormat, sinks []deliver.Sink, logger *slog.Logger, extra []kgo.Opt) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	decode, closeRegistry, err := deliveryDecoder(ctx, format, reg, logger)
	if err != nil {
		return err
	}
	defer closeRegistry()
	svc, err := deliver.New(cfg, sinks, deliver.Options{Logger: logger, Registerer: reg, ExtraKgoOpts: extra, Decode: decode})
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	srvCtx, stopServer := context.WithCancel(gctx)
	if cfg.MetricsAddr != "" {
		g.Go(func() error { return metrics.Serve(srvCtx, cfg.MetricsAddr, reg, svc.Ready, logger, nil) })
	}
	g.Go(func() error {
		defer stopServer()
		return svc.Run(gctx)
	})
	return g.Wait()
}

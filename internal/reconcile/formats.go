package reconcile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vibeline/processor/internal/alerts"
	"github.com/vibeline/processor/internal/avro"
	"github.com/vibeline/processor/internal/config"
	"github.com/vibeline/processor/internal/event"
	"github.com/vibeline/processor/internal/rules"
)

// formats are the value formats reconcile reads (docs/AVRO.md), as the
// processor configured with the same file reads and writes them: the
// decoder of each Avro source (nil: JSON), the schema registry, and the
// alert format.
//
// Every writer schema a topic's values need is fetched (Prepare) right
// after the topic is read, before any of its values is decoded: a
// registry that cannot answer stops the run with an error naming the
// registry and the schema id, so that no record is ever judged (a dead
// letter, a violation) because the registry was down. A schema id the
// registry answers it does not know is cached as such, and its records
// are schema_unknown, as the processor dead-lettered them.
type formats struct {
	reg      *avro.Registry
	decoders map[string]event.Decoder // by source topic; absent: JSON
	// prepare names the topics whose values carry registry schema ids:
	// registry-backed Avro sources, their rules' repartition topics (which
	// carry the source's values unchanged) and, with Avro alerts, the
	// alerts topics.
	prepare  map[string]bool
	alertDec *avro.AlertDecoder // nil: alerts are JSON
}

// rulesAndFormats compiles cfg's rules and builds their formats
// (newFormats), checking the registry's base URL when there is one
// (avro.Client.CheckBase): a wrong URL stops the run rather than make every
// schema id "not found".
func rulesAndFormats(ctx context.Context, cfg config.Config) ([]*rules.Compiled, *formats, error) {
	rs, err := cfg.Rules()
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: %w", err)
	}
	fm, err := newFormats(cfg, rs)
	if err != nil {
		return nil, nil, err
	}
	if fm.reg != nil {
		if err := fm.reg.Client().CheckBase(ctx); err != nil {
			return nil, nil, fmt.Errorf("reconcile: %w", err)
		}
	}
	return rs, fm, nil
}

// newFormats builds the decoders of cfg.Sources and the registry client
// for the rules rs (no I/O). The decoders are the processor's
// (avro.SourceDecoder, as internal/consume builds them).
func newFormats(cfg config.Config, rs []*rules.Compiled) (*formats, error) {
	f := &formats{decoders: map[string]event.Decoder{}, prepare: map[string]bool{}}
	if r := cfg.Registry; r.URL != "" {
		client, err := avro.NewClient(avro.ClientOptions{
			URL: r.URL, Username: r.Username, Password: r.Password.Reveal(), Timeout: r.Timeout,
		})
		if err != nil {
			return nil, fmt.Errorf("reconcile: registry.url: %w", err)
		}
		// One answer per schema id for the whole run: a "not found" is
		// never asked again (the processor's not_found_ttl would let one
		// run judge the same record two ways), and never forgotten.
		if f.reg, err = avro.NewRegistry(avro.RegistryOptions{
			Client: client, NotFoundTTL: time.Duration(math.MaxInt64), MaxNotFound: math.MaxInt32,
		}); err != nil {
			return nil, fmt.Errorf("reconcile: %w", err)
		}
	}
	for i, s := range cfg.Sources {
		s = cfg.SourceFormat(s.Topic)
		if s.Format != config.FormatAvro {
			continue
		}
		a := s.Avro
		d, fromRegistry, err := avro.SourceDecoder(f.reg, a.SchemaFile, uint32(a.SchemaID), a.Framing == config.FramingBare, nil)
		if err != nil {
			return nil, fmt.Errorf("reconcile: config: sources[%d].%w", i, err)
		}
		f.decoders[s.Topic], f.prepare[s.Topic] = d, fromRegistry
	}
	if cfg.AlertsFormat == config.FormatAvro {
		if f.reg == nil {
			return nil, errors.New(`reconcile: config: alerts_format "avro" needs registry.url`)
		}
		var err error
		if f.alertDec, err = avro.NewAlertDecoder(f.reg); err != nil {
			return nil, fmt.Errorf("reconcile: %w", err)
		}
	}
	for _, c := range rs {
		r := c.Rule
		if f.prepare[r.Source] && r.Repartitioned() {
			f.prepare[cfg.RepartitionFor(c)] = true
		}
		if f.alertDec != nil {
			f.prepare[r.Outputs.Alerts] = true
		}
	}
	return f, nil
}

// decoder is the decoder of the values of source topic (nil: JSON). A
// repartition topic carries its source's values: use the source's.
func (f *formats) decoder(source string) event.Decoder { return f.decoders[source] }

// prepareTopic fetches the writer schema of every schema id among the
// values of recs, read from topic, when the topic's values carry registry
// schema ids. An error names the registry and the schema id.
func (f *formats) prepareTopic(ctx context.Context, topic string, recs []*kgo.Record) error {
	if !f.prepare[topic] || len(recs) == 0 {
		return nil
	}
	values := make([][]byte, len(recs))
	for i, r := range recs {
		values[i] = r.Value
	}
	err := f.reg.Prepare(ctx, values)
	if err == nil {
		return nil
	}
	var pe *avro.PrepareError
	if errors.As(err, &pe) {
		return fmt.Errorf("reconcile: the schema registry at %s could not give schema id %d, which records of %s need: %w "+
			"(reconcile stops rather than judge records without their writer schema; run it again when the registry answers)",
			f.reg.Client().URL(), pe.ID, topic, err)
	}
	return fmt.Errorf("reconcile: the schema registry at %s, reading %s: %w", f.reg.Client().URL(), topic, err)
}

// decodeAlert reads one alert value in the configured alerts format:
// alerts.Decode (strict) for JSON, the Avro alert decoder for Avro (the
// topic's values were prepared when it was read).
func (f *formats) decodeAlert(value []byte) (alerts.Alert, error) {
	if f.alertDec == nil {
		return alerts.Decode(value)
	}
	return f.alertDec.DecodeAlert(value)
}

// comparable is an alert record's value as a recomputation produces it.
// The reference run of the pipeline (Stage.Reference, without
// EncodeAlert) writes alerts as JSON. For JSON alerts the committed value
// is compared byte for byte, as it is. An Avro alert value is compared
// through its decoded alert, re-encoded as the alert JSON: alerts.Alert
// carries every field of schemas/alert.avsc and the JSON encoding is
// canonical, so two Avro alerts compare equal exactly when their alerts
// are equal. The Avro bytes themselves are not compared: they also hold
// the schema id the registry gave the processor, which a recomputation
// cannot know. A value that does not decode is kept as is, so it differs.
func (f *formats) comparable(value []byte, a *alerts.Alert) []byte {
	if f.alertDec == nil {
		return value
	}
	if a == nil {
		d, err := f.alertDec.DecodeAlert(value)
		if err != nil {
			return value
		}
		a = &d
	}
	js, err := a.Encode()
	if err != nil {
		return value
	}
	return js
}

package avro

import (
	"errors"
	"fmt"
)

// SourceDecoder returns the decoder of one Avro source as the processor's
// configuration describes it (docs/AVRO.md, "Configuration"): with no
// schemaFile, writer schemas come from reg and fromRegistry is true (values
// must be Prepared before they are decoded); otherwise the local schema in
// schemaFile is the writer schema, found by schemaID in wire-format values,
// or applied to bare bodies when bare is set. A local schema that cannot be
// read as an event fails here, not as one dead letter per record. The
// errors start with the source's configuration key they are about
// ("avro.schema_file ..."): the caller prefixes which source
// ("sources[0].").
func SourceDecoder(reg *Registry, schemaFile string, schemaID uint32, bare bool, m *Metrics) (d *Decoder, fromRegistry bool, err error) {
	if schemaFile == "" {
		if reg == nil {
			return nil, false, errors.New("avro.schema_file is empty and registry.url is not set: format avro needs one of them")
		}
		d, err := NewDecoder(reg, DecoderOptions{Metrics: m})
		if err != nil {
			return nil, false, fmt.Errorf("avro (registry decoder): %w", err)
		}
		return d, true, nil
	}
	w, err := LoadSchemaFile(schemaFile)
	if err != nil {
		return nil, false, fmt.Errorf("avro.schema_file: %w", err)
	}
	bareDec, err := NewBareDecoder(w, DecoderOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("avro.schema_file = %q: %w", schemaFile, err)
	}
	if bare {
		return bareDec, false, nil
	}
	if d, err = NewDecoder(NewLocalSource(w, schemaID), DecoderOptions{}); err != nil {
		return nil, false, fmt.Errorf("avro.schema_file = %q: %w", schemaFile, err)
	}
	return d, false, nil
}

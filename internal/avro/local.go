package avro

import (
	"fmt"
	"os"

	hamba "github.com/hamba/avro/v2"
)

// LoadSchemaFile reads and parses a local Avro schema file (.avsc), for
// sources without a registry.
func LoadSchemaFile(path string) (hamba.Schema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("avro: schema file: %w", err)
	}
	s, err := parseSchema(string(b))
	if err != nil {
		return nil, fmt.Errorf("avro: schema file %s: %w", path, err)
	}
	return s, nil
}

// LocalSource is a Source with one local writer schema, for wire-format
// values whose producers do not use a registry the processor can reach.
// With ID 0 every schema id in a header maps to the schema; otherwise only
// ID does and any other id is not found (schema_unknown).
type LocalSource struct {
	schema hamba.Schema
	id     uint32
}

// NewLocalSource returns a Source that serves writer for id (0: any id).
func NewLocalSource(writer hamba.Schema, id uint32) *LocalSource {
	return &LocalSource{schema: writer, id: id}
}

// Schema implements Source.
func (l *LocalSource) Schema(id uint32) (hamba.Schema, error) {
	if l.id != 0 && id != l.id {
		return nil, &SchemaError{ID: id, Problem: fmt.Sprintf("is not the id of the local schema (%d)", l.id), Err: ErrSchemaNotFound}
	}
	return l.schema, nil
}

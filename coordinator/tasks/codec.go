package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// StrictJSON makes a handler refuse a JSON request that has a field the API
// does not know. Connect's own JSON codec drops such fields, so that clients
// and servers need not share a schema version; for the people's API that
// turned `"timeout": "10m"` (the spec file's key, not the API's
// timeout_seconds) into a task with no timeout at all, without a word, while
// the same key misspelt in a spec file is refused. The error names the field:
// `unknown field "timeout"`, as InvalidArgument. Binary protobuf is left to
// taskspec.Validate, which refuses a spec carrying unknown fields.
func StrictJSON() connect.HandlerOption {
	return connect.WithHandlerOptions(
		connect.WithCodec(strictJSON{name: "json"}),
		connect.WithCodec(strictJSON{name: "json; charset=utf-8"}),
	)
}

// strictJSON is Connect's protojson codec with DiscardUnknown off.
type strictJSON struct{ name string }

func (c strictJSON) Name() string { return c.name }

func (c strictJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.MarshalOptions{}.Marshal(pm)
}

// MarshalStable compacts the output: protojson varies its whitespace on
// purpose, and Connect uses this for GET requests that must be cacheable.
func (c strictJSON) MarshalStable(m any) ([]byte, error) {
	b, err := c.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func (c strictJSON) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if len(data) == 0 {
		return errors.New("empty body: a JSON request is an object, e.g. {}")
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(data, pm); err != nil {
		// protojson says `proto: (line 1:31): unknown field "timeout"`;
		// the hint says where the names come from.
		return fmt.Errorf("%w (the API takes podium.v1's field names, in snake_case or lowerCamelCase, and refuses any other)", err)
	}
	return nil
}

func (c strictJSON) IsBinary() bool { return false }

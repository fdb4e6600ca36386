package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// scriptJSON encodes m as podium's --json prints it, for scripts and jq
// rather than for the wire: field names as the .proto files spell them
// ("exit_code"); enum values as the words the flags take and the tables print
// ("failed", not "TASK_STATE_FAILED"; "online", not "NODE_STATUS_ONLINE");
// 64-bit integers as JSON numbers, not the strings protojson makes of them
// ("memory_mb": 24105); times in RFC 3339 (UTC) and durations as protojson
// writes them ("1.5s"). Fields at their zero value are left out, as the API
// leaves them out; the order is the .proto files' own, so output is stable.
//
// protojson's own encoding is the API's (Connect's JSON) and stays so: this
// is a view for people and their scripts, documented in the README, with a
// test per command.
func scriptJSON(m proto.Message) ([]byte, error) {
	var b bytes.Buffer
	if err := writeMessage(&b, m.ProtoReflect()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeMessage(b *bytes.Buffer, m protoreflect.Message) error {
	if strings.HasPrefix(string(m.Descriptor().FullName()), "google.protobuf.") {
		// Timestamps, durations and the like: protojson's forms are
		// already what a script wants (RFC 3339, "1.5s").
		raw, err := protojson.Marshal(m.Interface())
		if err != nil {
			return err
		}
		b.Write(raw)
		return nil
	}
	b.WriteByte('{')
	fields := m.Descriptor().Fields()
	first := true
	for i := range fields.Len() {
		f := fields.Get(i)
		if !m.Has(f) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeString(b, string(f.Name()))
		b.WriteByte(':')
		if err := writeField(b, f, m.Get(f)); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func writeField(b *bytes.Buffer, f protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch {
	case f.IsList():
		l := v.List()
		b.WriteByte('[')
		for i := range l.Len() {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeSingular(b, f, l.Get(i)); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case f.IsMap():
		var keys []protoreflect.MapKey
		v.Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		slices.SortFunc(keys, func(a, c protoreflect.MapKey) int { return strings.Compare(a.String(), c.String()) })
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k.String())
			b.WriteByte(':')
			if err := writeSingular(b, f.MapValue(), v.Map().Get(k)); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	}
	return writeSingular(b, f, v)
}

func writeSingular(b *bytes.Buffer, f protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return writeMessage(b, v.Message())
	case protoreflect.EnumKind:
		if ev := f.Enum().Values().ByNumber(v.Enum()); ev != nil {
			writeString(b, enumWord(f.Enum(), ev))
		} else {
			b.WriteString(strconv.Itoa(int(v.Enum())))
		}
	case protoreflect.BoolKind:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case protoreflect.StringKind:
		writeString(b, v.String())
	case protoreflect.BytesKind:
		writeString(b, base64.StdEncoding.EncodeToString(v.Bytes()))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		x := v.Float()
		switch {
		case math.IsNaN(x):
			writeString(b, "NaN")
		case math.IsInf(x, 1):
			writeString(b, "Infinity")
		case math.IsInf(x, -1):
			writeString(b, "-Infinity")
		default:
			bits := 64
			if f.Kind() == protoreflect.FloatKind {
				bits = 32
			}
			b.WriteString(strconv.FormatFloat(x, 'g', -1, bits))
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	default:
		return fmt.Errorf("field %s: kind %v has no JSON form here", f.FullName(), f.Kind())
	}
	return nil
}

// enumWord is an enum value as a person types it: lower case, without the
// enum's own name in front (NODE_STATUS_ONLINE of NodeStatus is
// "online").
func enumWord(e protoreflect.EnumDescriptor, v protoreflect.EnumValueDescriptor) string {
	return strings.ToLower(strings.TrimPrefix(string(v.Name()), upperSnake(string(e.Name()))+"_"))
}

// upperSnake spells a CamelCase name as its enum values' prefix does:
// TaskState is TASK_STATE.
func upperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}

// Package jsonerr turns encoding/json's errors about a user's file into messages
// that name the file, the line and column, and the field, in JSON's words: "want
// a number, got string", never a Go type such as "Go struct field .gpus of type
// int", and never a bare "unexpected EOF".
package jsonerr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Describe explains err, returned by decoding data read from path: Explain's
// message after the path.
func Describe(path string, data []byte, err error) error {
	e := Explain(data, err).(*described)
	e.msg = path + ": " + e.msg
	return e
}

// Explain explains err, returned by decoding data, without naming a file. The
// result wraps err, so errors.As still finds the json error.
func Explain(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		if syn.Offset >= int64(len(bytes.TrimRight(data, " \t\r\n"))) {
			return &described{"malformed JSON: it ends before its last value does (truncated?)", err}
		}
		return &described{fmt.Sprintf("malformed JSON at %s: %s", Position(data, syn.Offset-1),
			syn.Error()), err}
	case errors.As(err, &typ):
		return &described{fmt.Sprintf("at %s: %s", Position(data, typ.Offset), TypeMessage(typ)), err}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &described{"malformed JSON: it ends before its last value does (truncated?)", err}
	}
	return &described{strings.TrimPrefix(err.Error(), "json: "), err}
}

// TypeMessage says which field holds what kind of value instead of what:
// "gpus: want an integer, got string".
func TypeMessage(typ *json.UnmarshalTypeError) string {
	field := typ.Field
	if field == "" {
		field = "the top level"
	}
	return fmt.Sprintf("%s: want %s, got %s", field, kindOf(typ.Type), typ.Value)
}

// Position is "line L, column C" of byte offset off in data (both from 1). A
// syntax error's offset is just past the character at fault, a type error's
// just past the value.
func Position(data []byte, off int64) string {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := off - int64(bytes.LastIndexByte(before, '\n'))
	return fmt.Sprintf("line %d, column %d", line, col)
}

// kindOf names the JSON value a Go type decodes from.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return kindOf(t.Elem())
	}
	return "another value"
}

// described is a message in place of a json error it still wraps.
type described struct {
	msg string
	err error
}

func (d *described) Error() string { return d.msg }
func (d *described) Unwrap() error { return d.err }
